"""What the Spark loader refuses or reports instead of doing something a
user would not expect: an export that would lose damaged records without
a word, outputs and targets inside their own inputs, a store given as an
export, an import that would merge colliding message ids or take one
message twice, and Ctrl-C in the middle of a job (one line, exit 130,
nothing at the target)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, TextMessage, inspect
from jmsstore_spark import stores
from jmsstore_spark.checks import StoreImportError
from jmsstore_spark.cli import export, import_messages
from pyspark.sql import functions as F
from store_helpers import damage_record
from test_spark_cli import _one_line_usage_error, _run, without_spark

__all__ = ["without_spark"]  # the fixture, used by name


def _server(home: Path, count: int, name: str = "jms1", queue: str = "orders") -> Path:
    with JMSServer(home, name=name) as server, server.connection_factory().create_connection() as connection:
        producer = connection.create_session().create_producer(server.create_queue(queue))
        for i in range(count):
            producer.send(TextMessage(f"{name} m{i}"))
    return home / "store"


def _damaged(home: Path, count: int) -> tuple[Path, str]:
    """A store of ``count`` messages, one of them damaged (its checksum
    fails); the damaged message's id."""
    store = _server(home, count)
    victim = [r for r in inspect.records(store) if r.collection and r.collection.endswith("/orders")][4]
    damage_record(store, victim)
    return store, f"[{victim.offset}, "


def _spark_args() -> list[str]:
    return ["--master", "local[1]", "--conf", "spark.ui.enabled=false"]


def test_an_export_of_a_damaged_store_fails_unless_told_to_skip_the_damage(spark: Any, tmp_path: Path) -> None:
    store, where = _damaged(tmp_path / "srv", 10)
    with pytest.raises(stores.DamageError, match=r"1 damaged range .*0000000001\.seg") as refused:
        export(spark, [str(store)], str(tmp_path / "out"))
    assert where in str(refused.value) and "--skip-damaged" in str(refused.value)
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if ".staging-" in p.name]
    result = export(spark, [str(store)], str(tmp_path / "out"), skip_damaged=True)
    assert result["rows"] == 9
    [damage] = result["damaged"]
    assert damage["store"] == str(store) and damage["segment"] == 1 and damage["ranges"][0][0] == int(where[1:-2])


def test_the_export_command_says_what_damage_it_skipped(tmp_path: Path) -> None:
    store, where = _damaged(tmp_path / "srv", 10)
    refused = _run("export", str(store), "--to", str(tmp_path / "no"), *_spark_args())
    assert refused.returncode == 2, refused.stderr[-3000:]
    [line] = refused.stderr.splitlines()
    assert "1 damaged range" in line and where in line and "--skip-damaged" in line
    assert not (tmp_path / "no").exists()
    done = _run("export", str(store), "--to", str(tmp_path / "out"), "--skip-damaged", *_spark_args())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exported 9 rows" in done.stdout and "skipped 1 damaged range" in done.stdout
    assert "warning" in done.stderr and where in done.stderr


def test_outputs_and_targets_inside_their_inputs_are_refused(
    tmp_path: Path, without_spark: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    store = _server(tmp_path / "srv", 3)
    export_dir = tmp_path / "export"
    (export_dir / "store=x" / "destination=q").mkdir(parents=True)
    (export_dir / "store=x" / "destination=q" / "part-0.parquet").write_bytes(b"rows")
    cases = {
        ("export", str(store), "--to", str(store / "out")): f"{store / 'out'} is inside {store}",
        ("report", str(store), "--to", str(store / "reports")): f"{store / 'reports'} is inside {store}",
        ("import", str(export_dir), "--to", str(export_dir / "sub")): f"{export_dir / 'sub'} is inside {export_dir}",
        ("import", str(export_dir), "--to", str(export_dir / "s"), "--each-store"): "is inside",
        ("import", str(store), "--to", str(tmp_path / "new")): f"{store} is a jmsstore store, not an export",
    }
    for args, expected in cases.items():
        line = _one_line_usage_error(without_spark(*args))
        assert expected in line, (args, line)
    assert sorted(p.name for p in store.iterdir()) == sorted(p.name for p in store.iterdir() if p.name != "out")
    assert not (store / "out").exists() and not (store / "reports").exists()
    assert not (export_dir / "sub").exists() and not (export_dir / "s").exists() and not (tmp_path / "new").exists()


def test_several_exports_import_into_one_store(spark: Any, tmp_path: Path) -> None:
    one = _server(tmp_path / "one", 4, name="a", queue="orders")
    two = _server(tmp_path / "two", 3, name="b", queue="audit")
    export(spark, [str(one)], str(tmp_path / "e1"))
    export(spark, [str(two)], str(tmp_path / "e2"))
    result = import_messages(spark, [str(tmp_path / "e1"), str(tmp_path / "e2")], str(tmp_path / "new"))
    assert result["messages"] == 7


def test_an_export_of_stores_with_colliding_ids_is_refused_as_one_store(spark: Any, tmp_path: Path) -> None:
    store = _server(tmp_path / "a", 5)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same messages, the same ids
    export(spark, [str(store), str(tmp_path / "b" / "store")], str(tmp_path / "both"))
    with pytest.raises(StoreImportError, match=r"5 message ids .* more than one store.*--each-store"):
        import_messages(spark, [str(tmp_path / "both")], str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    # Stores of servers with other names have ids of their own: merged.
    other = _server(tmp_path / "c", 2, name="other")
    export(spark, [str(store), str(other)], str(tmp_path / "apart"))
    assert import_messages(spark, [str(tmp_path / "apart")], str(tmp_path / "merged"))["messages"] == 7


def test_one_export_read_twice_is_refused_and_nothing_is_written(spark: Any, tmp_path: Path) -> None:
    store = _server(tmp_path / "a", 5)
    export(spark, [str(store)], str(tmp_path / "e"))
    # Refused by the write's commit, which Spark reports in an error of its own.
    with pytest.raises(Exception, match=r"StoreImportError: the message at handle \d+ of store .* for queue 'orders'"):
        import_messages(spark, [str(tmp_path / "e"), str(tmp_path / "e")], str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if ".import-" in p.name]
    # Through the DataFrame writer too, where the frame is a union of the same rows.
    frame = spark.read.format("jmsstore").option("view", "messages").load(str(store))
    with pytest.raises(Exception, match="is in the frame twice"):
        frame.union(frame).write.format("jmsstore").mode("append").save(str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()
    # Copies given fresh ids are messages of their own, as are rows that name no store.
    plain = frame.drop("encoded")
    copies = plain.withColumn("message_id", F.lit(None).cast("string"))
    copies.union(plain).write.format("jmsstore").mode("append").save(str(tmp_path / "copies"))
    nameless = frame.drop("store")
    nameless.union(nameless).write.format("jmsstore").mode("append").save(str(tmp_path / "nameless"))
    for target in ("copies", "nameless"):
        stored = [r for r in inspect.records(tmp_path / target) if r.collection and r.collection.endswith("/orders")]
        assert len(stored) == 10  # both halves
    # Once is fine.
    assert import_messages(spark, [str(tmp_path / "e")], str(tmp_path / "new"))["messages"] == 5


def test_ctrl_c_during_an_import_is_one_line_and_exit_130(spark: Any, tmp_path: Path) -> None:
    # Enough rows that the import's tasks run for seconds on local[1]: the
    # interrupt must come while they run, not once the commit has begun.
    rows = spark.range(80_000).selectExpr(
        "'orders' AS destination", "'TextMessage' AS body_type", "concat('message ', id, repeat('x', 200)) AS text"
    )
    rows.repartition(8).write.parquet(str(tmp_path / "export"))
    target = tmp_path / "new"
    command = ["import", str(tmp_path / "export"), "--to", str(target), *_spark_args()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "jmsstore_spark.cli", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    try:
        deadline = time.monotonic() + 300
        # The tasks are running once the import's staging directory is there.
        while not [p for p in tmp_path.iterdir() if ".import-" in p.name] and proc.poll() is None:
            assert time.monotonic() < deadline, "the import never started"
            time.sleep(0.05)
        time.sleep(1)  # into the tasks
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert err == "jmsstore-spark: interrupted\n" and out == ""
    assert not target.exists() and not [p for p in tmp_path.iterdir() if ".import-" in p.name]
