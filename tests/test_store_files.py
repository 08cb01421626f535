"""What a store does to the files around it: it touches only files it made,
a failed open leaves nothing of its own behind, its files and the paging
directory are owner-only whatever the umask, and a store with more segments
than the process may hold descriptors still opens and works."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jmsstore import CorruptionError, FileStore, InvalidArgumentError, JMSServer, Pager

USER_FILES = {
    "notes.tmp": b"my notes",
    "data.prep": b"prepared data",
    "build.manifest": b"not a compaction manifest",
    "0000000001.seg.tmp": b"a copy of a segment, made by the user",
}


def write_user_files(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in USER_FILES.items():
        (directory / name).write_bytes(data)


def assert_user_files_intact(directory: Path) -> None:
    for name, data in USER_FILES.items():
        assert (directory / name).read_bytes() == data, name


def test_opening_a_store_beside_the_users_files_leaves_them_alone(tmp_path: Path) -> None:
    write_user_files(tmp_path)
    with FileStore(tmp_path, max_segment_bytes=1 << 20) as store:
        assert store.recovery_report["scratch_files_removed"] == 0
        handle = store.put("q", b"kept")
    assert_user_files_intact(tmp_path)
    with FileStore(tmp_path, max_segment_bytes=1 << 20) as store:
        assert store.read(handle) == b"kept"
    assert_user_files_intact(tmp_path)


def test_a_failed_open_leaves_the_users_files_and_nothing_of_its_own(tmp_path: Path) -> None:
    write_user_files(tmp_path)
    (tmp_path / "0000000003.seg").write_bytes(b"named like a segment, but is not one")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CorruptionError):
        FileStore(tmp_path)
    assert sorted(os.listdir(tmp_path)) == before, "no lock file, no spare segment"
    assert_user_files_intact(tmp_path)


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_owner_only(top: Path) -> int:
    """Every directory under ``top`` is 0700 and every file 0600; returns how many files."""
    files = 0
    assert mode(top) == 0o700, top
    for root, dirs, names in os.walk(top):
        for d in dirs:
            assert mode(Path(root) / d) == 0o700, Path(root) / d
        for n in names:
            assert mode(Path(root) / n) == 0o600, Path(root) / n
            files += 1
    return files


def test_a_servers_store_and_paging_directories_are_owner_only_under_umask_0(tmp_path: Path, umask_zero: None) -> None:
    home = tmp_path / "srv"
    server = JMSServer(home, max_segment_bytes=1 << 20, message_buffer_size=0)
    try:
        queue = server.create_queue("Q")
        factory = server.connection_factory()
        with factory.create_connection() as connection:
            session = connection.create_session()
            producer = session.create_producer(queue)
            producer.delivery_mode = 1  # non-persistent: paged out to a paging file (the budget is 0)
            for i in range(20):
                producer.send(session.create_text_message(f"paged {i}" * 100))
        paging = home / "paging" / "jms1"
        assert mode(home / "paging") == 0o700
        assert assert_owner_only(paging) >= 2, "the marker and a paging file"
        assert any(p.stat().st_size > 0 for p in paging.glob("*.page")), "something was paged out"
        assert assert_owner_only(home / "store") >= 2
    finally:
        server.close()


def test_a_pagers_own_paging_directory_is_owner_only_under_umask_0(tmp_path: Path, umask_zero: None) -> None:
    directory = tmp_path / "a" / "paging"
    pager = Pager(None, message_buffer_size=0, paging_directory=directory)
    try:
        destination = pager.create_destination("d")
        pager.add(destination, b"x" * 1000, id=1)
        assert mode(tmp_path / "a") == 0o700
        assert assert_owner_only(directory) >= 2
    finally:
        pager.close()


# --- empty paths and names that are not text ----------------------------------------------------


def test_a_server_with_an_empty_directory_is_refused_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="directory is an empty path"):
        JMSServer("")
    with pytest.raises(InvalidArgumentError, match="paging_directory is an empty path"):
        JMSServer(tmp_path / "srv", paging_directory="")
    assert list(tmp_path.iterdir()) == []


def test_a_pager_with_an_empty_paging_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="empty"):
        Pager(None, paging_directory="")
    assert list(tmp_path.iterdir()) == []


def test_names_with_a_lone_surrogate_are_invalid_arguments(tmp_path: Path) -> None:
    pager = Pager(None, paging_directory=tmp_path / "paging")
    try:
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            pager.create_destination("d\udcff")
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            pager.destination("d\udcff")
        destination = pager.create_destination("d")
        with pytest.raises(InvalidArgumentError, match="surrogate"):
            pager.add(destination, b"x", id=1, correlation_id="c\udcff")
        assert pager.count(destination) == 0
    finally:
        pager.close()
    server = JMSServer(tmp_path / "srv", max_segment_bytes=1 << 20)
    try:
        with pytest.raises(InvalidArgumentError):
            server.create_queue("q\udcff")
        with pytest.raises(InvalidArgumentError):
            server.create_topic("\ud800")
        assert server.destinations() == []
    finally:
        server.close()


# --- descriptors ---------------------------------------------------------------------------------

FD_LIMIT_CHILD = r"""
import os, resource, sys
from jmsstore import FileStore

path = sys.argv[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
options = dict(max_segment_bytes=4096, preallocate=False, compaction_threshold=0)
expected = {}
with FileStore(path, **options) as store:
    for first in range(0, 1200, 10):
        with store.transaction() as tx:
            for i in range(first, first + 10):
                body = b"object %d " % i * 20
                expected[tx.put("q", body)] = body
segments = sum(name.endswith(".seg") for name in os.listdir(path))
assert segments > 70, segments
with FileStore(path, **options) as store:
    for handle, body in expected.items():
        assert store.read(handle) == body, handle
    assert dict(store.scan("q")) == expected
    assert len(os.listdir("/proc/self/fd")) < 64
    for handle in list(expected)[::2]:
        store.delete(handle)
        del expected[handle]
    for i in range(100):
        body = b"more %d" % i
        expected[store.put("r", body)] = body
    report = store.compact()
    assert report["segments_compacted"] > 10, report
    assert {h: store.read(h) for h in expected} == expected
with FileStore(path, **options) as store:
    assert {h: store.read(h) for h in expected} == expected
print("ok", segments)
"""


def test_a_store_of_more_segments_than_the_descriptor_limit_opens_and_works(tmp_path: Path) -> None:
    # The limit is the process's: the store runs in a child that lowers it to 64.
    result = subprocess.run(
        [sys.executable, "-c", FD_LIMIT_CHILD, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok ")
