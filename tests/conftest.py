"""Shared fixtures for the Python test suites.

Stores opened through ``open_store`` use small segments (1 MiB) so that the
zero preallocation of a fresh segment stays cheap; every store a test opens
through it is closed at teardown.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, JMSServer
from jmsstore.net import StompServer, serve

# When a hypothesis test fails, hypothesis' pytest plugin imports its patch writer (and
# with it libcst, which subclasses the deprecated mypy_extensions.TypedDict) inside the
# report hook. Under ``filterwarnings = error`` that DeprecationWarning turns the failure
# report into an INTERNALERROR that hides the failing example, so import it here, once,
# with that one warning ignored.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="mypy_extensions.TypedDict is deprecated", category=DeprecationWarning)
    with contextlib.suppress(ImportError):  # libcst is optional
        import hypothesis.extra._patching  # noqa: F401

SMALL_SEGMENT = 1 << 20
REPO_ROOT = Path(__file__).resolve().parent.parent

Snapshot = dict[str, Any]


def take_snapshot(store: FileStore) -> Snapshot:
    """Everything observable about a store's contents: collections, every (handle, body), record count."""
    collections = store.collections()
    return {
        "collections": collections,
        "bodies": {name: list(store.scan(name)) for name in sorted(collections)},
        "records": store.stats()["records"],
    }


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A store directory that does not exist yet."""
    return tmp_path / "store"


@pytest.fixture
def open_store(store_dir: Path) -> Iterator[Callable[..., FileStore]]:
    """``open_store(path=None, **options)``: opens a FileStore (default: ``store_dir``, 1 MiB segments)."""
    opened: list[FileStore] = []

    def open_(path: str | os.PathLike[str] | None = None, **options: Any) -> FileStore:
        options.setdefault("max_segment_bytes", SMALL_SEGMENT)
        store = FileStore(store_dir if path is None else path, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[..., FileStore]) -> FileStore:
    """An open, empty store in ``store_dir``."""
    return open_store()


@pytest.fixture
def snapshot() -> Callable[[FileStore], Snapshot]:
    """``snapshot(store)``: see :func:`take_snapshot`."""
    return take_snapshot


@pytest.fixture
def snapshot_dir(store_dir: Path) -> Callable[..., Snapshot]:
    """``snapshot_dir(path=store_dir)``: reopens the store at ``path``, snapshots it and closes it."""

    def snap(path: Path | None = None) -> Snapshot:
        with FileStore(store_dir if path is None else path, max_segment_bytes=SMALL_SEGMENT) as store:
            return take_snapshot(store)

    return snap


class Holder:
    """A child process that opens a store, writes ``count`` records, reports and waits on stdin."""

    SCRIPT = r"""
import sys
from jmsstore import FileStore
path, count = sys.argv[1], int(sys.argv[2])
store = FileStore(path, max_segment_bytes=1 << 20)
handles = [store.put("held", b"held-%d" % i) for i in range(count)]
print("ready", ",".join(map(str, handles)), flush=True)
sys.stdin.readline()
store.close()
print("closed", flush=True)
"""

    def __init__(self, path: Path, count: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(path), str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready"):
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"holder process failed to start: {line!r} {err}")
        self.handles = [int(h) for h in line.split()[1].split(",")] if count else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            out, err = self.proc.communicate("\n", timeout=60)
            assert self.proc.returncode == 0, err
            assert "closed" in out


@pytest.fixture
def hold_store() -> Iterator[Callable[[Path, int], Holder]]:
    """``hold_store(path, count)``: a child process holding the store open (ended at teardown)."""
    holders: list[Holder] = []

    def start(path: Path, count: int) -> Holder:
        holder = Holder(path, count)
        holders.append(holder)
        return holder

    yield start
    for holder in holders:
        if holder.proc.poll() is None:
            holder.proc.kill()
            holder.proc.communicate()


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m jmsstore ARGS`` and returns the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "jmsstore", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli(*args)``: runs the jmsstore command in a subprocess."""
    return run_cli


# The JMS conformance suite's fixtures (server, servers, restart, server_dir) live in
# tests/jms_helpers.py with its plain helpers.
pytest_plugins = ["jms_helpers"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session for the whole run: UI off, the running
    interpreter for Python workers, quiet logging; the jmsstore data source registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from jmsstore_spark import register
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("jmsstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[StompServer]:
    """A STOMP endpoint on a loopback port, over a fresh JMS server (both closed at the end)."""
    jms = JMSServer(tmp_path / "home")
    try:
        with serve(jms, port=0) as server:
            yield server
    finally:
        jms.close()
