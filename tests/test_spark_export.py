"""The Spark loader's export: a store's messages as Parquet partitioned by
store and destination, written all or nothing (job and CLI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, TextMessage
from jmsstore_spark.cli import export


def _server(home: Path, count: int) -> None:
    with JMSServer(home) as server:
        orders, audit = server.create_queue("orders"), server.create_queue("audit")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(None)
            for i in range(count):
                producer.send(TextMessage(f"m{i}"), destination=orders if i % 3 else audit)


def test_export_writes_parquet_by_store_and_destination(spark: Any, tmp_path: Path) -> None:
    _server(tmp_path / "srv", 30)
    store = str(tmp_path / "srv" / "store")
    result = export(spark, [store], str(tmp_path / "out"))
    assert result["rows"] == 30
    parts = sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    assert len(parts) == 1 and parts[0].startswith("store=")  # partitioned by store, then destination
    back = spark.read.parquet(str(tmp_path / "out"))
    by_destination = {r.destination: r["count"] for r in back.groupBy("destination").count().collect()}
    assert by_destination == {"orders": 20, "audit": 10}
    original = spark.read.format("jmsstore").option("view", "messages").load(store)
    assert sorted(bytes(r.encoded) for r in back.select("encoded").collect()) == sorted(
        bytes(r.encoded) for r in original.select("encoded").collect()
    )
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]


def test_export_refuses_an_existing_directory_and_bad_stores(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    _server(tmp_path / "srv", 3)
    with pytest.raises(FileExistsError):
        export(spark, [str(tmp_path / "srv" / "store")], str(tmp_path / "out"))
    with pytest.raises(Exception, match="not a readable jmsstore store"):
        export(spark, [str(tmp_path / "out")], str(tmp_path / "out2"))
    assert not (tmp_path / "out2").exists()
    assert not [p for p in tmp_path.iterdir() if ".staging-" in p.name]


def test_the_export_command(tmp_path: Path) -> None:
    _server(tmp_path / "srv", 5)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    cmd = [sys.executable, "-m", "jmsstore_spark.cli", "export", str(tmp_path / "srv" / "store")]
    proc = subprocess.run(
        [*cmd, "--to", str(tmp_path / "out"), "--master", "local[1]", "--conf", "spark.ui.enabled=false"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "exported 5 rows" in proc.stdout
    bad = subprocess.run([*cmd, "--to", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "exists" in bad.stderr
