"""The Spark loader's import: messages into a new store through the store's
write path, so a JMSServer opened on it delivers them; all or nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from jmsstore import (
    AckMode,
    BytesMessage,
    FileStore,
    JMSServer,
    MapMessage,
    Queue,
    StreamMessage,
    TextMessage,
    inspect,
)
from jmsstore_spark.cli import export, import_messages
from jmsstore_spark.imports import StagedPart, _check_staged
from jmsstore_spark.outputs import OutputError
from pyspark.sql import functions as F


def _source(home: Path) -> None:
    """A server with queues, a topic with two durable subscriptions (one with
    a selector), every body type, headers, properties and redelivered messages."""
    with JMSServer(home, max_segment_bytes=64 * 1024) as server:
        orders = server.create_queue("orders", redelivery_limit=5)
        server.create_queue("orders.dlq")  # holds no messages: not in the export
        # Error destinations that name each other, one sorting after the other.
        audit = server.create_queue("audit", order="fifo", error_destination="orders")
        server.create_queue("orders", error_destination="audit")
        prices = server.create_topic("prices", error_destination="orders.dlq")
        with server.connection_factory().create_connection("app-1") as connection:
            session = connection.create_session()
            session.create_durable_subscriber(prices, "all").close()
            session.create_durable_subscriber(prices, "big", selector="size > 10").close()
            producer = session.create_producer(None)
            for i in range(60):
                message: Any
                if i % 4 == 0:
                    message = TextMessage(f"text {i} \u00e9\u4e2d")
                elif i % 4 == 1:
                    message = BytesMessage(bytes(range(256)) * (i % 5))
                elif i % 4 == 2:
                    message = MapMessage({"n": i, "x": 1.5, "ok": True, "raw": b"\x00\xff", "s": "v", "none": None})
                else:
                    message = StreamMessage([i, "two", 3.25, False, b"\x01"])
                message.set_property("size", i)
                message.set_property("ratio", i / 7)
                message.set_property("tag", f"t{i % 3}")
                message.correlation_id = f"c-{i}"
                message.type = "order" if i % 2 else None
                message.reply_to = orders if i % 5 == 0 else None
                destination = (orders, audit, prices)[i % 3]
                producer.send(
                    message, destination=destination, priority=i % 10, time_to_live=(3_600_000 if i % 7 == 0 else 0)
                )
            # Two handed out and not acknowledged: recorded, they come back redelivered.
            client = connection.create_session(ack_mode=AckMode.CLIENT)
            connection.start()
            consumer = client.create_consumer(orders)
            assert consumer.receive(5) is not None and consumer.receive(5) is not None
            client.close()


def _by_target(spark: Any, store: Path) -> dict[tuple[str, str, str | None], list[tuple[Any, ...]]]:
    """Per server, destination and subscription: the messages in store order."""
    rows = spark.read.format("jmsstore").option("view", "messages").load(str(store)).collect()
    out: dict[tuple[str, str, str | None], list[tuple[Any, ...]]] = {}
    for r in sorted(rows, key=lambda r: r.handle):
        out.setdefault((r.server, r.destination, r.subscription), []).append(
            (r.message_id, bytes(r.encoded), r.delivery_count, r.destination_settings, r.subscription_settings)
        )
    return out


def _drain(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What a JMSServer on ``home`` delivers, in delivery order."""
    got: dict[str, list[tuple[Any, ...]]] = {}
    with JMSServer(home) as server, server.connection_factory().create_connection("app-1") as connection:
        connection.start()
        session = connection.create_session(ack_mode=AckMode.AUTO)
        consumers = {
            "orders": session.create_consumer(server.create_queue("orders")),
            "audit": session.create_consumer(server.create_queue("audit")),
            "all": session.create_durable_subscriber(server.create_topic("prices"), "all"),
            "big": session.create_durable_subscriber(server.create_topic("prices"), "big", selector="size > 10"),
        }
        for name, consumer in consumers.items():
            while (m := consumer.receive(0.5)) is not None:
                got.setdefault(name, []).append(
                    (m.message_id, m.priority, m.timestamp, m.redelivered, m.delivery_count, m.get_property("size"))
                )
    return got


def test_export_then_import_round_trips_every_message_byte_for_byte(spark: Any, tmp_path: Path) -> None:
    _source(tmp_path / "src")
    original = _by_target(spark, tmp_path / "src" / "store")
    export(spark, [str(tmp_path / "src" / "store")], str(tmp_path / "parquet"))
    result = import_messages(spark, [str(tmp_path / "parquet")], str(tmp_path / "dst" / "store"))
    assert (
        result["messages"] == sum(len(v) for v in original.values()) == 20 + 20 + 20 + 17
    )  # "big" holds sizes over 10 only
    # Ids, headers, properties, bodies (the stored bytes), delivery counts and
    # settings, in the same order within each destination and subscription.
    assert _by_target(spark, tmp_path / "dst" / "store") == original
    assert not [p for p in (tmp_path / "dst").iterdir() if p.name.startswith(".")]  # no staging left
    # A server on the new store delivers exactly what one on the old store does.
    assert _drain(tmp_path / "dst") == _drain(tmp_path / "src")


def test_the_imported_server_keeps_its_destinations_and_makes_new_unique_ids(spark: Any, tmp_path: Path) -> None:
    _source(tmp_path / "src")
    df = spark.read.format("jmsstore").option("view", "messages").load(str(tmp_path / "src" / "store"))
    # Shuffled across tasks: the import restores each destination's order from the source handles.
    df.orderBy(F.rand(7)).repartition(3).write.format("jmsstore").mode("append").save(str(tmp_path / "dst" / "store"))
    assert _by_target(spark, tmp_path / "dst" / "store") == _by_target(spark, tmp_path / "src" / "store")
    with JMSServer(tmp_path / "dst") as server:
        names = sorted((d.kind, d.name) for d in server.destinations())
        assert names == [("queue", "audit"), ("queue", "orders"), ("queue", "orders.dlq"), ("topic", "prices")]
        audit, orders = server.settings(server.queue("audit")), server.settings(server.queue("orders"))
        assert (audit.error_destination, audit.order) == ("orders", "fifo")
        assert (orders.error_destination, orders.redelivery_limit) == ("audit", 5)
        assert server.settings(server.topic("prices")).error_destination == "orders.dlq"  # created empty
        subscriptions = {s["name"]: s for s in server.durable_subscriptions()}
        assert subscriptions["big"]["selector"] == "size > 10" and subscriptions["all"]["selector"] is None
        old_ids = {r.message_id for r in df.select("message_id").collect()}
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(server.create_queue("orders"))
            fresh = TextMessage("after the import")
            producer.send(fresh)
        assert fresh.message_id not in old_ids


def test_a_hand_built_frame_is_imported_with_fresh_ids(spark: Any, tmp_path: Path) -> None:
    rows: list[tuple[Any, ...]] = [
        (
            "inbox",
            "TextMessage",
            None,
            f"hello {i}",
            None,
            json.dumps({"n": i, "raw": {"float": "inf"}}),
            9 - i % 10,
            "queue:replies" if i % 2 else None,  # a fresh id must keep the reply_to
        )
        for i in range(12)
    ]
    rows.append(("inbox", "BytesMessage", "ID:given-1", None, b"\x00\x01", None, 4, None))
    rows.append(("inbox", "MapMessage", None, None, None, None, 4, None))
    # A broker-style id too large to be a real boot: not taken for the boot counter.
    rows.append(("inbox", "TextMessage", "ID:edge-1700000000-1", "odd", None, None, 4, None))
    schema = (
        "destination string, body_type string, message_id string, text string, body binary, properties string, "
        "priority int, reply_to string"
    )
    df = spark.createDataFrame(rows, schema).repartition(3)
    df.write.format("jmsstore").mode("append").option("server", "edge").save(str(tmp_path / "new" / "store"))
    with JMSServer(tmp_path / "new", name="edge") as server, server.connection_factory().create_connection() as c:
        c.start()
        consumer = c.create_session().create_consumer(server.create_queue("inbox"))
        got = []
        while (m := consumer.receive(0.5)) is not None:
            got.append(m)
        assert len(got) == 15 and server.boot < 100
        assert [m.priority for m in got] == sorted((m.priority for m in got), reverse=True)
        ids = [m.message_id for m in got]
        assert len(set(ids)) == 15 and "ID:given-1" in ids
        texts = {m.text: m for m in got if isinstance(m, TextMessage)}
        assert texts["hello 3"].get_property("n") == 3 and texts["hello 3"].get_property("raw") == float("inf")
        assert texts["hello 3"].reply_to == Queue("replies") and texts["hello 2"].reply_to is None
        assert next(m for m in got if isinstance(m, BytesMessage)).body == b"\x00\x01"
        producer = c.create_session().create_producer(server.create_queue("inbox"))
        later = TextMessage("new")
        producer.send(later)
        assert later.message_id not in ids  # the server's next boot is past the fresh ids' boot


def _nothing_written(tmp_path: Path, target: Path) -> None:
    assert not target.exists()
    assert not [p for p in target.parent.iterdir() if ".import-" in p.name]


def test_bad_frames_are_refused_and_nothing_is_written(spark: Any, tmp_path: Path) -> None:
    target = tmp_path / "out" / "store"
    target.parent.mkdir()
    missing = spark.createDataFrame([("x",)], "text string")
    with pytest.raises(Exception, match="the column 'destination' is missing"):
        missing.write.format("jmsstore").mode("append").save(str(target))
    _nothing_written(tmp_path, target)
    no_body = spark.createDataFrame([("q",)], "destination string")
    with pytest.raises(Exception, match=r"'encoded' .* or 'body_type'"):
        no_body.write.format("jmsstore").mode("append").save(str(target))
    wrong_type = spark.createDataFrame(
        [("q", "TextMessage", "high")], "destination string, body_type string, priority string"
    )
    with pytest.raises(Exception, match="'priority' is string, not"):
        wrong_type.write.format("jmsstore").mode("append").save(str(target))
    _nothing_written(tmp_path, target)
    # Row errors fail the job after some tasks have staged rows: the staging goes, nothing appears.
    good = [("q", "TextMessage", f"m{i}", "PERSISTENT") for i in range(50)]
    for bad_row, match in (
        (("q", "TextMessage", "x", "NON_PERSISTENT"), "NON_PERSISTENT message"),
        ((None, "TextMessage", "x", "PERSISTENT"), "destination is null"),
        (("q", "ObjectMessage", "x", "PERSISTENT"), "body_type 'ObjectMessage'"),
        (("bad/name", "TextMessage", "x", "PERSISTENT"), "queue name 'bad/name'"),
    ):
        frame = spark.createDataFrame(
            [*good, bad_row], "destination string, body_type string, text string, delivery_mode string"
        )
        with pytest.raises(Exception, match=match):
            frame.repartition(4).write.format("jmsstore").mode("append").save(str(target))
        _nothing_written(tmp_path, target)
    corrupt = spark.createDataFrame([("q", b"\x01\x09garbage")], "destination string, encoded binary")
    with pytest.raises(Exception, match=r"not a jmsstore message"):
        corrupt.write.format("jmsstore").mode("append").save(str(target))
    _nothing_written(tmp_path, target)
    with pytest.raises(Exception, match=r"codec"):
        spark.createDataFrame(
            good, "destination string, body_type string, text string, delivery_mode string"
        ).write.format("jmsstore").mode("append").option("codec", "snappy").save(str(target))
    _nothing_written(tmp_path, target)


def test_existing_targets_are_refused_or_replaced_whole(spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame(
        [("q", "TextMessage", f"v1 {i}") for i in range(5)], "destination string, body_type string, text string"
    )
    target = tmp_path / "store"
    frame.write.format("jmsstore").mode("append").save(str(target))
    before = sorted(p.name for p in target.iterdir())
    with pytest.raises(Exception, match="is not empty: an import writes a new store"):
        frame.write.format("jmsstore").mode("append").save(str(target))
    assert sorted(p.name for p in target.iterdir()) == before
    # Overwrite replaces a store that nothing has open ...
    second = spark.createDataFrame(
        [("q", "TextMessage", f"v2 {i}") for i in range(3)], "destination string, body_type string, text string"
    )
    second.write.format("jmsstore").mode("overwrite").save(str(target))
    live, _ = inspect.live(target)
    assert sum(1 for _, c, _, _ in live if c == "jms/jms1/q/q") == 3
    # ... but not one that is open, and never a directory that is not a store.
    with JMSServer(tmp_path / "open") as server:
        server.create_queue("q")
        with pytest.raises(Exception, match="is open in another process"):
            second.write.format("jmsstore").mode("overwrite").save(str(tmp_path / "open" / "store"))
    other = tmp_path / "documents"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    with pytest.raises(Exception, match="not a jmsstore store: overwrite refuses"):
        second.write.format("jmsstore").mode("overwrite").save(str(other))
    assert (other / "keep.txt").read_text() == "precious"
    # An empty directory is a new store.
    (tmp_path / "empty").mkdir()
    frame.write.format("jmsstore").mode("append").save(str(tmp_path / "empty"))
    assert len(inspect.live(tmp_path / "empty")[0]) == 5 + 2  # the messages, the queue and the boot counter
    assert not [p for p in tmp_path.iterdir() if ".import-" in p.name]


def test_the_import_command(tmp_path: Path, spark: Any) -> None:
    with JMSServer(tmp_path / "src") as server, server.connection_factory().create_connection() as connection:
        producer = connection.create_session().create_producer(server.create_queue("jobs"))
        for i in range(7):
            producer.send(TextMessage(f"job {i}"))
    export(spark, [str(tmp_path / "src" / "store")], str(tmp_path / "parquet"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, "-m", "jmsstore_spark.cli", "import", str(tmp_path / "parquet"), "--to"]
    spark_args = ["--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    proc = subprocess.run(
        [*cmd, str(tmp_path / "dst" / "store"), *spark_args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imported 7 messages into 1 queues and subscriptions" in proc.stdout
    bad = subprocess.run(
        [*cmd, str(tmp_path / "dst" / "store"), *spark_args], capture_output=True, text=True, env=env, timeout=300
    )
    assert bad.returncode == 2 and "is not empty: an import writes a new store" in bad.stderr
    each = subprocess.run(
        [*cmd, str(tmp_path / "each"), "--each-store", *spark_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert each.returncode == 0, each.stderr[-2000:]
    assert f"imported 7 messages into 1 queues and subscriptions of {tmp_path / 'each' / 'store'}" in each.stdout
    assert "imported 7 messages into 1 stores" in each.stdout
    with JMSServer(tmp_path / "dst") as server, server.connection_factory().create_connection() as c:
        c.start()
        consumer = c.create_session().create_consumer(Queue("jobs"))
        assert [consumer.receive(1).text for _ in range(7)] == [f"job {i}" for i in range(7)]  # type: ignore[union-attr]


def test_overwrite_swaps_the_stores_in_one_step(tmp_path: Path) -> None:
    from jmsstore_spark.imports import _exchange

    new, old = tmp_path / "new", tmp_path / "old"
    for directory, text in ((new, "new"), (old, "old")):
        directory.mkdir()
        (directory / "which").write_text(text)
    assert _exchange(str(new), str(old))  # renameat2(RENAME_EXCHANGE): Linux 3.15+, ext4
    assert (old / "which").read_text() == "new" and (new / "which").read_text() == "old"
    with pytest.raises(FileNotFoundError):
        _exchange(str(tmp_path / "missing"), str(old))


def test_the_boot_counter_passes_every_id_the_source_server_gave(spark: Any, tmp_path: Path) -> None:
    """Ids of consumed messages are in no export; the server's boot counter
    (the server_boot column) keeps the new store from giving them again."""
    src = tmp_path / "src"
    with JMSServer(src) as server, server.connection_factory().create_connection() as c:
        server.create_queue("q")
        c.create_session().create_producer(Queue("q")).send(TextMessage("kept"))  # boot 1
    for _ in range(3):  # boots 2, 3, 4: their sends consumed
        with JMSServer(src) as server, server.connection_factory().create_connection() as c:
            session = c.create_session()
            session.create_producer(server.create_queue("other")).send(TextMessage("gone"))
            c.start()
            assert session.create_consumer(Queue("other")).receive(1).text == "gone"  # type: ignore[union-attr]
    df = spark.read.format("jmsstore").option("view", "messages").load(str(src / "store"))
    assert {r.server_boot for r in df.collect()} == {4}
    df.write.format("jmsstore").mode("append").save(str(tmp_path / "dst" / "store"))
    with JMSServer(tmp_path / "dst") as server:
        assert server.boot == 5
    # Overwrite: the replaced store's own servers count too.
    with JMSServer(tmp_path / "big") as server:
        server.create_queue("q")
    for _ in range(8):
        JMSServer(tmp_path / "big").close()
    df.write.format("jmsstore").mode("overwrite").save(str(tmp_path / "big" / "store"))
    with JMSServer(tmp_path / "big") as server:
        assert server.boot == 10 and server.message_count(Queue("q")) == 1


def test_what_recovery_would_remove_is_not_exported(spark: Any, tmp_path: Path) -> None:
    with JMSServer(tmp_path / "srv") as server, server.connection_factory().create_connection() as c:
        c.create_session().create_producer(server.create_queue("q")).send(TextMessage("real"))
    with FileStore(tmp_path / "srv" / "store") as store:  # an interrupted deletion's leftovers
        store.put("jms/jms1/q/deleted", b"left behind")
        store.put("jms/jms1/s/999", b"left behind")
    df = spark.read.format("jmsstore").option("view", "messages").load(str(tmp_path / "srv" / "store"))
    assert [r.text for r in df.collect()] == ["real"]


def test_one_durable_subscription_on_two_topics_is_refused(spark: Any, tmp_path: Path) -> None:
    rows = [("t1", "topic", "audit", "app", "TextMessage", "a"), ("t2", "topic", "audit", "app", "TextMessage", "b")]
    schema = "destination string, destination_type string, subscription string, client_id string, body_type string"
    schema += ", text string"
    frame = spark.createDataFrame(rows, schema)
    with pytest.raises(Exception, match="'audit' of client 'app' on server 'jms1' is on two topics"):
        frame.write.format("jmsstore").mode("append").save(str(tmp_path / "s"))
    assert not (tmp_path / "s").exists() and not list(tmp_path.iterdir())


def test_a_failed_overwrite_puts_the_old_store_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jmsstore_spark import imports

    with JMSServer(tmp_path / "old") as server:
        server.create_queue("kept")
    with FileStore(tmp_path / "staging" / "store") as store:
        store.put("x", b"new")
    before = sorted(p.name for p in (tmp_path / "old" / "store").iterdir())
    real_rename = os.rename
    calls: list[str] = []

    def rename(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == 2:  # the new store into place
            raise OSError("disk gone")
        real_rename(src, dst)

    monkeypatch.setattr(imports, "_exchange", lambda a, b: False)  # a kernel without renameat2
    monkeypatch.setattr(imports.os, "rename", rename)
    with pytest.raises(OSError, match="disk gone"):
        imports._publish(
            str(tmp_path / "staging" / "store"), str(tmp_path / "old" / "store"), True, str(tmp_path / "staging")
        )
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "old" / "store").iterdir()) == before
    with JMSServer(tmp_path / "old") as server:
        assert [d.name for d in server.destinations()] == ["kept"]


def test_the_commit_refuses_parts_the_driver_does_not_see_whole(tmp_path: Path) -> None:
    staged = tmp_path / "part-00000.arrow"
    table = pa.table({"row": pa.array([0, 1], pa.int64())})
    with pa.OSFile(str(staged), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    _check_staged([StagedPart(str(staged), 2, {}), StagedPart(str(tmp_path / "empty"), 0, {})])
    with pytest.raises(OutputError, match=r"holds 2 rows, not the 3 its task staged"):
        _check_staged([StagedPart(str(staged), 3, {})])
    with pytest.raises(OutputError, match=r"part-00001.arrow, staged by a task, is not readable here .* share"):
        _check_staged([StagedPart(str(tmp_path / "part-00001.arrow"), 3, {})])


def test_each_source_store_is_imported_into_its_own_store_by_its_own_task(spark: Any, tmp_path: Path) -> None:
    from jmsstore_spark.cli import import_each, target_stores

    _source(tmp_path / "src" / "a")
    for count, name in ((6, "b"), (7, "c")):
        with JMSServer(tmp_path / "src" / name) as server, server.connection_factory().create_connection() as c:
            producer = c.create_session().create_producer(server.create_queue(f"jobs-{name}"))
            for i in range(count):
                producer.send(TextMessage(f"{name} {i}"))
    sources = [str(tmp_path / "src" / name / "store") for name in "abc"]
    export(spark, sources, str(tmp_path / "parquet"))
    targets = target_stores(sources, str(tmp_path / "dst"))
    assert targets == {s: str(tmp_path / "dst" / name / "store") for s, name in zip(sources, "abc", strict=True)}

    result = import_each(spark, [str(tmp_path / "parquet")], str(tmp_path / "dst"))

    for source, target in targets.items():
        assert _by_target(spark, Path(target)) == _by_target(spark, Path(source))  # its messages, and only those
    assert [s["messages"] for s in result["stores"]] == [77, 6, 7]
    assert [s["to"] for s in result["stores"]] == list(targets.values())
    # One job stage of three tasks, one per target store.
    assert sorted(s["partition"] for s in result["stores"]) == [0, 1, 2]
    assert len({s["stage"] for s in result["stores"]}) == 1
    assert not [p for p in (tmp_path / "dst").rglob("*") if ".import-" in p.name]  # no staging left
    assert _drain(tmp_path / "dst" / "a") == _drain(tmp_path / "src" / "a")


def test_a_failed_target_leaves_no_store_behind(spark: Any, tmp_path: Path) -> None:
    from jmsstore_spark.cli import import_each

    for name in ("a", "b"):
        with JMSServer(tmp_path / "src" / name) as server, server.connection_factory().create_connection() as c:
            producer = c.create_session().create_producer(None)
            producer.send(TextMessage(name), destination=server.create_queue("jobs"))
            producer.send(TextMessage(name), destination=server.create_queue("other"))
    export(spark, [str(tmp_path / "src" / "*" / "store")], str(tmp_path / "parquet"))
    # b's rows make 'jobs' both a queue and a topic: refused by the task that
    # loads b's store, and a's store, loaded by its own task, is not published.
    frame = spark.read.parquet(str(tmp_path / "parquet")).drop("encoded")
    moved = F.col("store").endswith("b/store") & (F.col("destination") == "other")
    frame = frame.withColumns(
        {
            "destination_type": F.when(moved, "topic").otherwise(F.col("destination_type")),
            "subscription": F.when(moved, "s").otherwise(F.col("subscription")),
            "destination": F.when(moved, "jobs").otherwise(F.col("destination")),
        }
    )
    frame.write.parquet(str(tmp_path / "edited"))
    with pytest.raises(Exception, match="'jobs' of server 'jms1' is both a queue and a topic"):
        import_each(spark, [str(tmp_path / "edited")], str(tmp_path / "dst"))
    assert not [p for p in (tmp_path / "dst").rglob("*") if p.is_file()]
