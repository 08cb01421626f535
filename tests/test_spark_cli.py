"""The ``jmsstore-spark`` command's first minutes: every argument is checked
before Spark starts (one line, exit 2, and pyspark never imported), Spark
is quiet unless ``--verbose``, and a failed job is one line and exit 1.

The checks run the real command in a subprocess whose ``pyspark`` is a
stand-in that fails loudly when imported: an error that still needs Spark
to be found shows up as that failure, not as a slow pass."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from jmsstore import JMSServer, TextMessage
from jmsstore_spark.checks import check_parquet, local_path, store_paths
from jmsstore_spark.cli import _first_line, spark_settings

_POISON = """\
import os, sys
sys.stderr.write("pyspark was imported\\n")
sys.stderr.flush()
os._exit(99)
"""

# What Spark's JVM prints when it talks: log4j lines, its notes on logging,
# stage progress bars, Java stack frames.
_SPARK_NOISE = (" WARN ", " INFO ", "log4j", "Setting default log level", "[Stage ", "\tat ", "Exception in")


def _server(home: Path, count: int) -> Path:
    with JMSServer(home) as server, server.connection_factory().create_connection() as connection:
        producer = connection.create_session().create_producer(server.create_queue("orders"))
        for i in range(count):
            producer.send(TextMessage(f"m{i}"))
    return home / "store"


def _run(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jmsstore_spark.cli", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else dict(os.environ, PYSPARK_PYTHON=sys.executable),
        timeout=timeout,
    )


@pytest.fixture
def without_spark(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run(*args)``: the command in a subprocess where importing pyspark exits 99."""
    poison = tmp_path / "poison"
    (poison / "pyspark").mkdir(parents=True)
    (poison / "pyspark" / "__init__.py").write_text(_POISON)
    path = os.pathsep.join([str(poison), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, PYTHONPATH=path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run(*args, env=env, timeout=60)

    return run


def _one_line_usage_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert "pyspark was imported" not in proc.stderr, "the check needed Spark"
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jmsstore-spark"), proc.stderr
    assert "Traceback" not in proc.stderr and not any(n in proc.stderr for n in _SPARK_NOISE)
    return lines[0]


def test_a_missing_store_fails_before_spark_starts(
    tmp_path: Path, without_spark: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    missing = str(tmp_path / "no-such-store")
    for command in (["export", missing, "--to", str(tmp_path / "out")], ["report", missing]):
        line = _one_line_usage_error(without_spark(*command))
        assert line == f"jmsstore-spark: {missing} is not a readable jmsstore store: it does not exist"
    assert not (tmp_path / "out").exists()


def test_every_command_checks_its_arguments_before_spark_starts(
    tmp_path: Path, without_spark: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    store = str(_server(tmp_path / "srv", 3))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not a store")
    (tmp_path / "taken").mkdir()
    (tmp_path / "empty").mkdir()
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    (parquet / "part-0.parquet").write_bytes(b"rows")
    (tmp_path / "file").write_text("a file")
    cases = {
        ("export", str(plain), "--to", str(tmp_path / "o")): f"{plain} is not a readable jmsstore store: no segment",
        ("export", str(tmp_path / "nothing-*"), "--to", str(tmp_path / "o")): "no store directory matches",
        ("export", store, "--to", str(tmp_path / "taken")): f"{tmp_path / 'taken'} exists: export writes a new",
        ("export", store, "--to", str(tmp_path / "file" / "out")): f"{tmp_path / 'file'} is not a directory",
        ("export", store, "--to", str(tmp_path / "o"), "--view", "all"): "argument --view: invalid choice",
        ("export", store): "the following arguments are required: --to",
        ("export", store, "--to", str(tmp_path / "o"), "--conf", "spark.jmsstore.localShortcut=no"): "true or false",
        ("report", store, "--to", str(tmp_path / "taken")): "exists: report writes a new directory",
        ("report", store, "--rows", "-1"): "argument --rows: a count from 0 to 2147483647, not '-1'",
        ("report", store, "--redelivered", "many"): "argument --redelivered: a count from 0",
        ("report", store, "--conf", "spark.ui.enabled"): "--conf takes KEY=VALUE, not 'spark.ui.enabled'",
        ("import", str(tmp_path / "gone"), "--to", str(tmp_path / "n")): f"{tmp_path / 'gone'} does not exist",
        ("import", str(tmp_path / "empty"), "--to", str(tmp_path / "n")): "holds no Parquet files",
        ("import", str(parquet), "--to", str(plain)): "is not empty: an import writes a new store",
        ("import", str(parquet), "--to", str(plain), "--overwrite"): "not a jmsstore store: overwrite refuses",
        ("import", str(parquet), "--to", str(tmp_path / "n"), "--codec", "rar"): "--codec is one of none, gzip",
        ("import", str(parquet), "--to", str(tmp_path / "n"), "--server", "a b"): "server name 'a b' must be",
        ("import", str(parquet), "--to", "hdfs://nn/s", "--each-store", "--overwrite"): "replaces a store on the local",
        ("import", str(parquet), "--to", "hdfs://namenode/s", "--overwrite"): "replaces a store on the local file",
    }
    for args, expected in cases.items():
        line = _one_line_usage_error(without_spark(*args))
        assert expected in line, (args, line)
    assert not (tmp_path / "o").exists() and not (tmp_path / "n").exists()


def test_a_store_open_in_another_process_is_not_overwritten(
    tmp_path: Path, without_spark: Callable[..., subprocess.CompletedProcess[str]], hold_store: Callable[..., object]
) -> None:
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    (parquet / "part-0.parquet").write_bytes(b"rows")
    hold_store(tmp_path / "held", 1)
    line = _one_line_usage_error(without_spark("import", str(parquet), "--to", str(tmp_path / "held"), "--overwrite"))
    assert line.endswith("is open in another process: overwrite refuses it")


def test_the_checks_and_the_command_import_neither_pyspark_nor_pyarrow() -> None:
    probe = (
        "import sys, jmsstore_spark, jmsstore_spark.checks, jmsstore_spark.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'py4j')))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_paths_and_uris(tmp_path: Path) -> None:
    assert local_path("/data/s") == "/data/s" and local_path("rel:ative/s") == "rel:ative/s"
    assert local_path("file:///data/my%20store") == "/data/my store" and local_path("FILE:/data/s") == "/data/s"
    assert local_path("hdfs://namenode/data/s") is None
    with pytest.raises(ValueError, match="not one on host 'elsewhere'"):
        local_path("file://elsewhere/data/s")
    store = _server(tmp_path / "srv", 1)
    assert store_paths(store.as_uri()) == [str(store)]
    check_parquet("hdfs://namenode/exports/x")  # Spark checks it
    with pytest.raises(ValueError, match="nothing matches"):
        check_parquet(str(tmp_path / "exports-*"))


def test_spark_settings_are_quiet_unless_verbose() -> None:
    quiet = spark_settings(None, ["spark.sql.shuffle.partitions=4"])
    assert quiet["spark.master"] == "local[*]" and quiet["spark.sql.shuffle.partitions"] == "4"
    assert quiet["spark.ui.showConsoleProgress"] == "false"
    option = quiet["spark.driver.extraJavaOptions"]
    assert option.startswith("-Dlog4j2.configurationFile=file:/")
    config = Path(option.split("=", 1)[1].removeprefix("file://"))
    assert "rootLogger.level = fatal" in config.read_text()
    mine = spark_settings("local[1]", ["spark.driver.extraJavaOptions=-Dx=1", "spark.ui.showConsoleProgress=true"])
    assert mine["spark.driver.extraJavaOptions"] == f"{option} -Dx=1"  # added to the user's own options
    assert mine["spark.ui.showConsoleProgress"] == "true"  # --conf wins
    own = spark_settings(None, ["spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=/etc/mine.properties"])
    assert own["spark.driver.extraJavaOptions"] == "-Dlog4j2.configurationFile=/etc/mine.properties"
    verbose = spark_settings(None, [], verbose=True)
    assert "spark.ui.showConsoleProgress" not in verbose and "spark.driver.extraJavaOptions" not in verbose


def test_spark_is_quiet_by_default_and_talks_with_verbose(tmp_path: Path) -> None:
    store = str(_server(tmp_path / "srv", 5))
    spark_args = ["--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    quiet = _run("report", store, "--to", str(tmp_path / "quiet"), *spark_args)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stdout.startswith("backlog: 1 row\n") and "wrote 6 reports" in quiet.stdout
    noise = [line for line in quiet.stderr.splitlines() if any(n in line for n in _SPARK_NOISE)]
    assert noise == [] and "incubator" not in quiet.stderr, quiet.stderr[-3000:]
    verbose = _run("export", store, "--to", str(tmp_path / "verbose"), "--verbose", *spark_args)
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "exported 5 rows" in verbose.stdout
    assert any(n in verbose.stderr for n in (" WARN ", "log4j", "Setting default log level")), verbose.stderr


def test_a_failed_job_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    parquet = tmp_path / "parquet"
    parquet.mkdir()
    (parquet / "part-0.parquet").write_bytes(b"not parquet at all")
    proc = _run("import", str(parquet), "--to", str(tmp_path / "new"), "--master", "local[1]")
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("jmsstore-spark: "), proc.stderr[-3000:]
    assert lines[0].endswith("(--verbose for Spark's log)") and "part-0.parquet" in lines[0]
    assert not (tmp_path / "new").exists()


def test_the_error_line_is_the_message_that_says_what_went_wrong() -> None:
    py4j = RuntimeError(
        "An error occurred while calling o38.parquet.\n"
        ": org.apache.spark.SparkException: [FAILED_READ_FILE] Encountered error while reading file part-0.parquet.\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotReadFilesError(QueryExecutionErrors.scala:1)\n"
    )
    assert _first_line(py4j) == "[FAILED_READ_FILE] Encountered error while reading file part-0.parquet."
    worker = RuntimeError(
        "An exception was thrown from the Python worker.\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in f\nOSError: [Errno 28] No space left on device\n'
    )
    assert _first_line(worker) == "OSError: [Errno 28] No space left on device"
    wrapped = RuntimeError("Job aborted.\npyspark...\nStoreImportError: row 3: the column 'destination' is null\n")
    assert _first_line(wrapped) == "row 3: the column 'destination' is null"
