"""The Spark loader on a real standalone cluster: a master and one worker
started from the installed pyspark, bound to 127.0.0.1, running the
``jmsstore-spark`` commands with ``--master spark://...``. What the cluster
computes must be what the in-process ``local[2]`` session computes.

The cluster's jobs run as command subprocesses (one driver each), never as a
second session inside the test process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq
import pytest
from jmsstore import AckMode, JMSServer, TextMessage
from jmsstore_spark.cli import export, import_messages
from jmsstore_spark.reports import evaluate, release, reports

_REGISTER_SECONDS = 60
_JOB_SECONDS = 240
_STOP_SECONDS = 15
_REGISTERED = "Successfully registered with master"
# Short-lived JVMs on a small machine start faster without the optimising
# compiler and with the serial collector.
_QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
_THROUGH_HADOOP = ("--conf", "spark.jmsstore.localShortcut=false")
# The export and import through the Hadoop layer on the cluster too: two more
# drivers, about doubling the test's time; tests/test_spark_hadoop.py covers
# the layer on local[2] in every run, JMSSTORE_LONG=1 adds these.
_THROUGH_HADOOP_TOO = bool(os.environ.get("JMSSTORE_LONG"))


def _spark_class() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    return path if path.is_file() else None


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def _missing() -> str | None:
    """Why no standalone cluster can start here, or None."""
    if _spark_class() is None:
        return "pyspark/bin/spark-class is not installed"
    if _java() is None:
        return "no java on PATH or in JAVA_HOME: a standalone Spark cluster needs one"
    return None


# Decided at collection, before the session-wide local Spark fixture would start (and fail) without Java.
pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminates the process and its group (a worker's executors), then
    kills what is left after a bounded wait."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=_STOP_SECONDS)


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


class Cluster(NamedTuple):
    master: str
    #: The worker's directory: one ``app-*`` directory per application it ran executors for.
    work_dir: Path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on 127.0.0.1, both
    stopped afterwards."""
    spark_class = _spark_class()
    assert spark_class is not None  # else the module is skipped
    home = tmp_path_factory.mktemp("cluster")
    for name in ("conf", "logs", "work"):
        (home / name).mkdir()
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_CONF_DIR=str(home / "conf"),  # Spark's defaults, nothing from the machine
        SPARK_LOG_DIR=str(home / "logs"),
        SPARK_PID_DIR=str(home / "logs"),
        SPARK_WORKER_DIR=str(home / "work"),
        # The REST submission server would take the fixed port 6066.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        SPARK_DAEMON_JAVA_OPTS=_QUICK_JVM,
    )
    master_port = _free_port()
    url = f"spark://127.0.0.1:{master_port}"
    commands = {
        "master": [
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(_free_port())),
        ],
        "worker": [
            "org.apache.spark.deploy.worker.Worker",
            *("--host", "127.0.0.1", "--port", str(_free_port()), "--webui-port", str(_free_port())),
            *("--cores", "1", "--memory", "1g", "--work-dir", str(home / "work"), url),
        ],
    }
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in commands.items():
            with open(home / "logs" / f"{name}.log", "wb") as log:
                # Its own process group: stopping it reaches the executors it launched.
                started.append(
                    subprocess.Popen(
                        [str(spark_class), *args],
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        worker_log = home / "logs" / "worker.log"
        deadline = time.monotonic() + _REGISTER_SECONDS
        while _REGISTERED not in worker_log.read_text(errors="replace"):
            exited = [p.args for p in started if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                why = f"exited: {exited}" if exited else f"not registered after {_REGISTER_SECONDS} s"
                raise AssertionError(
                    f"the standalone cluster did not start ({why})\nmaster:\n{_tail(home / 'logs' / 'master.log')}"
                    f"\nworker:\n{_tail(worker_log)}"
                )
            time.sleep(0.25)
        yield Cluster(url, home / "work")
    finally:
        for process in reversed(started):
            _stop(process)


def _store(home: Path) -> Path:
    """A server with a queue, a topic with a durable subscription, and two
    messages handed out and not acknowledged (redelivered)."""
    with JMSServer(home) as server, server.connection_factory().create_connection("app-1") as connection:
        orders = server.create_queue("orders")
        prices = server.create_topic("prices")
        session = connection.create_session()
        session.create_durable_subscriber(prices, "all").close()
        producer = session.create_producer(None)
        for i in range(40):
            producer.send(TextMessage(f"m{i}"), destination=(orders, prices)[i % 2])
        client = connection.create_session(ack_mode=AckMode.CLIENT)
        connection.start()
        consumer = client.create_consumer(orders)
        assert consumer.receive(5) is not None and consumer.receive(5) is not None
        client.close()
    return home / "store"


def _command(master: str, *args: str, executor_memory: str = "512m") -> subprocess.Popen[str]:
    """``jmsstore-spark ARGS --master MASTER``, its driver on 127.0.0.1."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    spark_conf = ["spark.driver.host=127.0.0.1", "spark.ui.enabled=false", f"spark.executor.memory={executor_memory}"]
    spark_conf.append("spark.sql.shuffle.partitions=2")  # tiny stores: 200 shuffle tasks on one core cost more
    spark_conf += [f"spark.driver.extraJavaOptions={_QUICK_JVM}", f"spark.executor.extraJavaOptions={_QUICK_JVM}"]
    return subprocess.Popen(
        [sys.executable, "-m", "jmsstore_spark.cli", *args, "--master", master]
        + [item for conf in spark_conf for item in ("--conf", conf)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(name: str, process: subprocess.Popen[str], deadline: float) -> str:
    """The command's output once it has exited 0 (killed at ``deadline``)."""
    try:
        out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"{name} did not finish in time:\n{out}\n{err}") from None
    assert process.returncode == 0, f"{name} failed ({process.returncode}):\n{out}\n{err}"
    return out


def _exported(parquet: Path) -> list[tuple[str, str | None, str]]:
    """(destination, subscription, message id) of every exported row."""
    table = pq.read_table(parquet, partitioning="hive")
    rows = zip(
        table["destination"].to_pylist(),
        table["subscription"].to_pylist(),
        table["message_id"].to_pylist(),
        strict=True,
    )
    return sorted((str(d), s, m) for d, s, m in rows)


def _messages(spark: Any, store: Path) -> list[tuple[str, str | None, str, int]]:
    rows = spark.read.format("jmsstore").option("view", "messages").load(str(store)).collect()
    return sorted((r.destination, r.subscription, r.message_id, r.delivery_count) for r in rows)


def test_export_import_and_report_on_a_standalone_cluster_equal_the_local_run(
    cluster: Cluster, spark: Any, tmp_path: Path
) -> None:
    store = _store(tmp_path / "src")
    local_export = tmp_path / "local.parquet"
    exported = export(spark, [str(store)], str(local_export))
    # The three cluster jobs start at once: their drivers start side by side
    # while the worker's one core runs their tasks in turn.
    deadline = time.monotonic() + _JOB_SECONDS
    jobs = {
        "export": _command(cluster.master, "export", str(store), "--to", str(tmp_path / "cluster.parquet")),
        "import": _command(
            cluster.master, "import", str(local_export), "--to", str(tmp_path / "cluster-import" / "store")
        ),
        "report": _command(cluster.master, "report", str(store), "--to", str(tmp_path / "cluster-reports")),
    }
    if _THROUGH_HADOOP_TOO:
        # Through the Hadoop layer, as for hdfs:// (see test_spark_hadoop): the
        # worker's executor stages the segments Spark read on its local disk;
        # the import's driver receives the staged rows and copies its store up.
        jobs["export-hadoop"] = _command(
            cluster.master,
            "export",
            store.as_uri(),
            "--to",
            (tmp_path / "hadoop.parquet").as_uri(),
            *_THROUGH_HADOOP,
            # A task holds a whole segment (64 MiB here) several times over
            # (Spark's binaryFile row, its Arrow batch): 512 MiB is too little.
            executor_memory="1g",
        )
        jobs["import-hadoop"] = _command(
            cluster.master,
            "import",
            local_export.as_uri(),
            "--to",
            (tmp_path / "hadoop-import" / "store").as_uri(),
            *_THROUGH_HADOOP,
        )
    try:
        # The local run's import and reports while the cluster works.
        imported = import_messages(spark, [str(local_export)], str(tmp_path / "local-import" / "store"))
        frames = reports(spark, [str(store)])
        try:
            counts = evaluate(frames)
        finally:
            release(frames)
        outputs = {name: _finish(name, job, deadline) for name, job in jobs.items()}
    finally:
        for job in jobs.values():
            if job.poll() is None:
                job.kill()
                job.communicate()

    assert len(list(cluster.work_dir.glob("app-*"))) == len(jobs)  # each job's tasks ran on the worker
    assert exported["rows"] == 40  # a row per message in a queue or a subscription
    assert f"exported {exported['rows']} rows" in outputs["export"]
    assert _exported(tmp_path / "cluster.parquet") == _exported(local_export)
    if _THROUGH_HADOOP_TOO:
        assert (
            f"exported {exported['rows']} rows" in outputs["export-hadoop"]
            and "bytes staged)" in outputs["export-hadoop"]
        )
        assert _exported(tmp_path / "hadoop.parquet") == _exported(local_export)

    assert f"imported {imported['messages']} messages" in outputs["import"]
    on_cluster = _messages(spark, tmp_path / "cluster-import" / "store")
    assert on_cluster == _messages(spark, tmp_path / "local-import" / "store")
    assert len(on_cluster) == imported["messages"] and sum(count for *_, count in on_cluster) == 2
    if _THROUGH_HADOOP_TOO:
        assert f"imported {imported['messages']} messages" in outputs["import-hadoop"]
        assert _messages(spark, tmp_path / "hadoop-import" / "store") == on_cluster

    summary = json.loads((tmp_path / "cluster-reports" / "summary.json").read_text())
    assert summary["rows"] == counts
    for name, rows in counts.items():
        assert pq.read_table(tmp_path / "cluster-reports" / f"{name}.parquet").num_rows == rows
