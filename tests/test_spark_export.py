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
from jmsstore_spark import cli
from jmsstore_spark.cli import export
from jmsstore_spark.outputs import OutputError, Outputs


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


def _losing(monkeypatch: pytest.MonkeyPatch, keep: int) -> None:
    """Between the write and its verification, all but ``keep`` of the
    staged data files go (as if executors had written them where the driver
    cannot see); ``_SUCCESS`` stays."""
    check_parquet = Outputs.check_parquet

    def losing(self: Outputs, uri: str, rows: int, what: str) -> None:
        parts = sorted(Path(uri.removeprefix("file:")).rglob("part-*"))
        assert len(parts) > keep
        for part in parts[keep:]:
            part.unlink()
        check_parquet(self, uri, rows, what)

    monkeypatch.setattr(Outputs, "check_parquet", losing)


def test_an_export_that_reads_back_short_fails_and_leaves_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _server(tmp_path / "srv", 30)
    _losing(monkeypatch, keep=1)
    with pytest.raises(OutputError, match=r"^export: \d+ rows read back from file:.*/\.out\.staging-\w+, not the 30"):
        export(spark, [str(tmp_path / "srv" / "store")], str(tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv"]  # no target, no staging


def test_an_export_that_committed_only_success_fails_and_leaves_nothing(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _server(tmp_path / "srv", 30)
    _losing(monkeypatch, keep=0)
    with pytest.raises(OutputError, match=r"committed no data files .* driver and every executor share"):
        export(spark, [str(tmp_path / "srv" / "store")], str(tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv"]


def test_an_export_of_nothing_fails(spark: Any, tmp_path: Path) -> None:
    with JMSServer(tmp_path / "srv") as server:
        server.create_queue("orders")
    with pytest.raises(OutputError, match="nothing to export: the stores hold no messages"):
        export(spark, [str(tmp_path / "srv" / "store")], str(tmp_path / "out"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv"]


def test_export_takes_file_uris(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _server(tmp_path / "srv", 6)
    monkeypatch.chdir(tmp_path)
    result = export(spark, [(tmp_path / "srv" / "store").as_uri()], f"file://{tmp_path}/out")
    assert result == {**result, "rows": 6, "to": str(tmp_path / "out")}
    assert spark.read.parquet(str(tmp_path / "out")).count() == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "srv"]  # not ./file:/...


def test_the_export_command_fails_in_one_line_when_nothing_reads_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _server(tmp_path / "srv", 10)
    _losing(monkeypatch, keep=0)
    monkeypatch.setattr(cli, "session", lambda *args, **kwargs: spark)  # the tests' session, not stopped
    monkeypatch.setattr(spark, "stop", lambda: None)
    code = cli.main(["export", str(tmp_path / "srv" / "store"), "--to", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("jmsstore-spark: export: the job committed no data files to file:") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["srv"]
