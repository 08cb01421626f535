"""Stores and outputs behind any Hadoop file system: read, exported,
reported and imported through Spark's Hadoop layer.

No file system but the local one is reachable here, so these tests send
``file:`` URIs and plain paths through the Hadoop layer with
``spark.jmsstore.localShortcut=false``: the driver lists stores and reads
segment headers through the JVM's ``FileSystem``, Spark's ``binaryFile``
source reads the segments, the tasks stage them on their local disk, and an
import copies its store up through the layer and renames it into place,
exactly as for ``hdfs://`` or ``s3a://``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, TextMessage, inspect
from jmsstore_spark import cli
from jmsstore_spark.checks import messages_by_collection
from jmsstore_spark.cli import export, import_each, import_messages
from jmsstore_spark.hadoop import LOCAL_SHORTCUT, HadoopFiles, StoreLocationError
from jmsstore_spark.outputs import OutputError
from jmsstore_spark.reports import evaluate, release, reports
from jmsstore_spark.stores import read_view, resolve_stores, store_segments


def _server(home: Path, count: int) -> None:
    with JMSServer(home, max_segment_bytes=64 * 1024) as server:
        orders, audit = server.create_queue("orders"), server.create_queue("audit")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(None)
            for i in range(count):
                producer.send(TextMessage(f"m{i}"), destination=orders if i % 3 else audit)


@pytest.fixture
def hadoop(spark: Any) -> Iterator[Any]:
    """The test session with the local shortcut off: every path and
    ``file:`` URI goes through the Hadoop layer (put back afterwards)."""
    spark.conf.set(LOCAL_SHORTCUT, "false")
    try:
        yield spark
    finally:
        spark.conf.unset(LOCAL_SHORTCUT)


def _rows(df: Any) -> list[tuple[Any, ...]]:
    """Every row but its ``store`` column (a path in place, a URI through Hadoop), sorted."""
    columns = [c for c in df.columns if c != "store"]
    return sorted(tuple(r) for r in df.select(*columns).collect())


def test_a_store_is_read_through_the_hadoop_layer_as_in_place(spark: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 12)
    store = tmp_path / "srv" / "store"
    in_place = {view: _rows(read_view(spark, view, [str(store)])[0]) for view in ("records", "messages")}
    segments = inspect.segments(store)
    spark.conf.set(LOCAL_SHORTCUT, "false")
    try:
        [uri] = resolve_stores(spark, [f"file://{tmp_path}/srv/st*"])  # a glob, matched through the layer
        assert uri == f"file:{store}"
        listed = store_segments(spark, uri)
        assert [(s["number"], s["kind"], s["size"]) for s in listed] == [
            (s["number"], s["kind"], s["size"]) for s in segments
        ]
        assert [s["path"] for s in listed] == [f"{uri}/{os.path.basename(s['path'])}" for s in segments]
        for view in ("records", "messages"):
            df, staging = read_view(spark, view, [uri])
            assert staging is not None
            assert _rows(df) == in_place[view]
            assert {r.store for r in df.select("store").distinct().collect()} == {uri}
            assert staging.staged() == {"segments": staging.segments, "bytes": staging.bytes}
        assert staging.bytes == sum(s["size"] for s in segments)  # the messages view: the segments with messages
    finally:
        spark.conf.unset(LOCAL_SHORTCUT)


def test_export_and_report_through_the_hadoop_layer(hadoop: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 30)
    result = export(hadoop, [(tmp_path / "srv" / "store").as_uri()], f"file://{tmp_path}/out")
    assert result["rows"] == 30 and result["to"] == str(tmp_path / "out")
    assert result["staged"]["segments"] >= 1 and result["staged"]["bytes"] > 0
    back = hadoop.read.parquet(str(tmp_path / "out"))
    assert {r.destination: r["count"] for r in back.groupBy("destination").count().collect()} == {
        "orders": 20,
        "audit": 10,
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "srv"]  # no staging left
    plain = export(hadoop, [str(tmp_path / "srv" / "store")], str(tmp_path / "plain"))  # plain paths too
    assert plain["rows"] == 30 and "staged" in plain
    frames = reports(hadoop, [(tmp_path / "srv" / "store").as_uri()], as_of_ms=0)
    try:
        counts = evaluate(frames)
    finally:
        release(frames)
    assert counts["backlog"] == 2 and counts["damage"] == 0 and counts["transactions"] == 0
    with JMSServer(tmp_path / "empty") as server:
        server.create_queue("orders")
    with pytest.raises(OutputError, match="nothing to export: the stores hold no messages"):
        export(hadoop, [(tmp_path / "empty" / "store").as_uri()], str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()


def test_an_import_into_a_uri_copies_the_store_up_and_renames_it(hadoop: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 9)
    export(hadoop, [str(tmp_path / "srv" / "store")], str(tmp_path / "out"))
    target = tmp_path / "new" / "store"
    result = import_messages(hadoop, [str(tmp_path / "out")], target.as_uri())
    assert result == {**result, "messages": 9, "collections": 2, "to": f"file:{target}"}
    assert result["bytes"] == sum(f.stat().st_size for f in target.iterdir())
    assert sorted(p.name for p in target.parent.iterdir()) == ["store"]  # no staging left
    assert not [p for p in target.iterdir() if p.name.endswith(".crc")]  # store files only
    with JMSServer(tmp_path / "new") as server, server.connection_factory().create_connection() as connection:
        connection.start()
        session = connection.create_session()
        for name, expected in (("orders", 6), ("audit", 3)):
            consumer = session.create_consumer(server.create_queue(name))
            texts = []
            while (message := consumer.receive(0.5)) is not None:
                texts.append(message.text)
            assert len(texts) == expected
    with pytest.raises(Exception, match="exists"):
        import_messages(hadoop, [str(tmp_path / "out")], target.as_uri())


def test_a_failed_import_into_a_uri_leaves_nothing(hadoop: Any, tmp_path: Path) -> None:
    bad = hadoop.createDataFrame(
        [("orders", "TextMessage", "x", "queue"), ("orders", "TextMessage", "y", "bogus")],
        "destination string, body_type string, text string, destination_type string",
    )
    bad.write.parquet(str(tmp_path / "bad"))
    with pytest.raises(Exception, match="destination_type 'bogus' is not queue or topic"):
        import_messages(hadoop, [str(tmp_path / "bad")], (tmp_path / "new" / "store").as_uri())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]  # no target, no staging


def test_an_unknown_scheme_is_refused_naming_it_and_nothing_is_written(spark: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 3)
    store = str(tmp_path / "srv" / "store")
    with pytest.raises(StoreLocationError, match="no file system for the scheme 'nosuch'"):
        export(spark, ["nosuch://x/store"], str(tmp_path / "out"))
    with pytest.raises(StoreLocationError, match="no file system for the scheme 'nosuch'"):
        export(spark, [store], "nosuch://x/out")
    with pytest.raises(StoreLocationError, match="no file system for the scheme 'nosuch'"):
        import_messages(spark, [str(tmp_path / "srv")], "nosuch://x/store")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv"]


def test_the_commands_take_hadoop_uris(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _server(tmp_path / "srv", 5)
    monkeypatch.setattr(cli, "session", lambda *args, **kwargs: spark)  # the tests' session, not stopped
    monkeypatch.setattr(spark, "stop", lambda: None)
    code = cli.main(["export", "nosuch://x/store", "--to", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("jmsstore-spark: nosuch://x/store: Hadoop has no file system for the scheme 'nosuch'")
    through = ["--conf", f"{LOCAL_SHORTCUT}=false"]
    spark.conf.set(LOCAL_SHORTCUT, "false")  # what the session the command starts would have
    try:
        code = cli.main(["export", (tmp_path / "srv" / "store").as_uri(), "--to", f"file://{tmp_path}/out", *through])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert out.startswith(f"exported 5 rows to {tmp_path}/out") and "bytes staged)" in out
        code = cli.main(["import", f"file://{tmp_path}/out", "--to", f"file://{tmp_path}/new", *through])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert out.startswith(f"imported 5 messages into 2 queues and subscriptions of file:{tmp_path}/new")
        code = cli.main(["import", f"file://{tmp_path}/out", "--to", f"file://{tmp_path}/x", "--overwrite", *through])
        assert code == 2 and "--overwrite replaces a store on the local file system only" in capsys.readouterr().err
    finally:
        spark.conf.unset(LOCAL_SHORTCUT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out", "srv"]


@pytest.mark.parametrize("shortcut", ["true", "false"])
def test_publishing_never_replaces_what_is_there(spark: Any, tmp_path: Path, shortcut: str) -> None:
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "new").write_text("new")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "old").write_text("old")
    spark.conf.set(LOCAL_SHORTCUT, shortcut)
    try:
        files = HadoopFiles(spark)
        with pytest.raises(FileExistsError, match="target exists"):
            files.rename_new(f"file:{tmp_path}/staging", f"file:{tmp_path}/target")
        assert sorted(p.name for p in (tmp_path / "target").iterdir()) == ["old"]
        assert (tmp_path / "staging" / "new").exists()
        files.rename_new(f"file:{tmp_path}/staging", f"file:{tmp_path}/fresh")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "target"]
    finally:
        spark.conf.unset(LOCAL_SHORTCUT)


def test_what_is_not_a_store_is_refused_through_the_hadoop_layer(hadoop: Any, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("not a store")
    with pytest.raises(StoreLocationError, match="is not a readable jmsstore store: no segment files"):
        resolve_stores(hadoop, [(tmp_path / "plain").as_uri()])
    with pytest.raises(StoreLocationError, match="no store directory matches"):
        resolve_stores(hadoop, [f"file://{tmp_path}/gone-*"])


def test_the_data_source_writes_file_uris_in_place_and_refuses_other_schemes(spark: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 4)
    messages = spark.read.format("jmsstore").option("view", "messages").load(str(tmp_path / "srv" / "store"))
    with pytest.raises(Exception, match="writes stores on the local file system only"):
        messages.write.format("jmsstore").mode("append").save("nosuch://x/store")
    messages.write.format("jmsstore").mode("append").save((tmp_path / "new" / "store").as_uri())
    assert sum(messages_by_collection(str(tmp_path / "new" / "store")).values()) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "srv"]  # not ./file:/...


def test_an_import_of_each_store_into_uris_publishes_every_store_or_none(hadoop: Any, tmp_path: Path) -> None:
    _server(tmp_path / "crashed" / "a", 6)
    _server(tmp_path / "crashed" / "b", 3)
    stores = [str(tmp_path / "crashed" / name / "store") for name in ("a", "b")]
    export(hadoop, stores, str(tmp_path / "out"))
    (tmp_path / "taken" / "b" / "store").mkdir(parents=True)
    with pytest.raises(Exception, match="b/store exists"):
        import_each(hadoop, [str(tmp_path / "out")], (tmp_path / "taken").as_uri())
    assert sorted(p.name for p in (tmp_path / "taken").iterdir()) == ["b"]  # nothing for a either
    result = import_each(hadoop, [str(tmp_path / "out")], (tmp_path / "restored").as_uri())
    assert [(s["to"], s["messages"], s["collections"]) for s in result["stores"]] == [
        (f"file:{tmp_path}/restored/a/store", 6, 2),
        (f"file:{tmp_path}/restored/b/store", 3, 2),
    ]
    for name, count in (("a", 6), ("b", 3)):
        assert sum(messages_by_collection(str(tmp_path / "restored" / name / "store")).values()) == count
        assert sorted(p.name for p in (tmp_path / "restored" / name).iterdir()) == ["store"]
