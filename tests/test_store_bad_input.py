"""Bad input gets a clear, typed exception and changes nothing.

"Nothing changed" is checked against a full snapshot of the store (collections,
every ``(handle, body)`` by scan, the record count), both on the open store and
after a reopen.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jmsstore
import pytest
from jmsstore import (
    FileStore,
    InvalidArgumentError,
    JmsStoreError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    UnknownHandleError,
)

SEGMENT = 8192  # small segments: the body limit is small, so oversized bodies are cheap
Snapshot = dict[str, Any]


class Populated:
    """A store with a little of everything, and its snapshot."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = FileStore(path, max_segment_bytes=SEGMENT)
        s = self.store
        self.a = [s.put("a", b"a%d" % i) for i in range(5)]
        self.b = [s.put("b", b"b%d" % i * 20) for i in range(3)]
        s.update(self.a[0], b"a0 updated")
        s.delete(self.a[1])
        self.deleted = self.a[1]
        with s.transaction() as tx:
            tx.put("c", b"c0")
            tx.delete(self.b[2])
        self.live = self.a[0]
        self.unknown = 10**9
        self.before = take(s)

    def reopen_snapshot(self) -> Snapshot:
        self.store.close()
        with FileStore(self.path, max_segment_bytes=SEGMENT) as s:
            return take(s)


def take(store: FileStore) -> Snapshot:
    collections = store.collections()
    return {
        "collections": collections,
        "bodies": {name: list(store.scan(name)) for name in sorted(collections)},
        "records": store.stats()["records"],
    }


def dir_fingerprint(path: Path) -> dict[str, str]:
    """Names and contents of every file under ``path`` (the lock file's content is irrelevant)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def populated(store_dir: Path) -> Iterator[Populated]:
    p = Populated(store_dir)
    yield p
    p.store.close()


def assert_unchanged(p: Populated) -> None:
    assert take(p.store) == p.before
    assert p.reopen_snapshot() == p.before


# --- operations on an open store ----------------------------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[FileStore, Populated], object], type[BaseException], str]] = [
    # wrong Python types
    ("put str body", lambda s, p: s.put("a", "text"), TypeError, "bytes"),
    ("put int body", lambda s, p: s.put("a", 5), TypeError, "bytes"),
    ("put None body", lambda s, p: s.put("a", None), TypeError, "bytes"),
    ("put int collection", lambda s, p: s.put(1, b"x"), TypeError, "str"),
    ("put bytes collection", lambda s, p: s.put(b"a", b"x"), TypeError, "str"),
    ("put None collection", lambda s, p: s.put(None, b"x"), TypeError, "str"),
    ("put_async str body", lambda s, p: s.put_async("a", "text"), TypeError, "bytes"),
    ("put_async bytes collection", lambda s, p: s.put_async(b"a", b"x"), TypeError, "str"),
    ("update str body", lambda s, p: s.update(p.live, "text"), TypeError, "bytes"),
    ("read float handle", lambda s, p: s.read(float(p.live)), TypeError, "int"),
    ("update float handle", lambda s, p: s.update(float(p.live), b"x"), TypeError, "int"),
    ("delete float handle", lambda s, p: s.delete(float(p.live)), TypeError, "int"),
    ("read str handle", lambda s, p: s.read(str(p.live)), TypeError, "int"),
    ("update str handle", lambda s, p: s.update(str(p.live), b"x"), TypeError, "int"),
    ("delete str handle", lambda s, p: s.delete(str(p.live)), TypeError, "int"),
    ("read None handle", lambda s, p: s.read(None), TypeError, "int"),
    ("delete None handle", lambda s, p: s.delete(None), TypeError, "int"),
    ("read bool handle", lambda s, p: s.read(True), TypeError, "bool"),
    ("update bool handle", lambda s, p: s.update(True, b"x"), TypeError, "bool"),
    ("delete bool handle", lambda s, p: s.delete(True), TypeError, "bool"),
    ("collection_of str handle", lambda s, p: s.collection_of("1"), TypeError, "int"),
    ("scan bytes collection", lambda s, p: list(s.scan(b"a")), TypeError, "str"),
    ("handles int collection", lambda s, p: list(s.handles(1)), TypeError, "str"),
    ("count bytes collection", lambda s, p: s.count(b"a"), TypeError, "str"),
    ("scan float batch", lambda s, p: list(s.scan("a", batch_size=1.5)), TypeError, "int"),
    ("tx put str body", lambda s, p: s.transaction().put("a", "x"), TypeError, "bytes"),
    ("tx update float handle", lambda s, p: s.transaction().update(1.0, b"x"), TypeError, "int"),
    ("tx delete None handle", lambda s, p: s.transaction().delete(None), TypeError, "int"),
    # handles out of range
    ("read negative handle", lambda s, p: s.read(-1), UnknownHandleError, "-1"),
    ("update negative handle", lambda s, p: s.update(-5, b"x"), UnknownHandleError, "-5"),
    ("delete negative handle", lambda s, p: s.delete(-1), UnknownHandleError, "-1"),
    ("read 2**64", lambda s, p: s.read(2**64), UnknownHandleError, str(2**64)),
    ("update 2**64", lambda s, p: s.update(2**64, b"x"), UnknownHandleError, str(2**64)),
    ("delete 2**64", lambda s, p: s.delete(2**64), UnknownHandleError, str(2**64)),
    ("delete 2**64-1", lambda s, p: s.delete(2**64 - 1), UnknownHandleError, str(2**64 - 1)),
    ("collection_of 2**100", lambda s, p: s.collection_of(2**100), UnknownHandleError, str(2**100)),
    # unknown handles
    ("read unknown", lambda s, p: s.read(p.unknown), UnknownHandleError, "unknown handle"),
    ("update unknown", lambda s, p: s.update(p.unknown, b"x"), UnknownHandleError, "unknown handle"),
    ("delete unknown", lambda s, p: s.delete(p.unknown), UnknownHandleError, "unknown handle"),
    ("read deleted", lambda s, p: s.read(p.deleted), UnknownHandleError, "unknown handle"),
    ("update deleted", lambda s, p: s.update(p.deleted, b"x"), UnknownHandleError, "unknown handle"),
    ("delete deleted", lambda s, p: s.delete(p.deleted), UnknownHandleError, "unknown handle"),
    ("read handle 0", lambda s, p: s.read(0), UnknownHandleError, "unknown handle"),
    # oversized bodies
    ("put too big", lambda s, p: s.put("a", b"x" * (s.max_body_bytes + 1)), InvalidArgumentError, "limit"),
    ("put much too big", lambda s, p: s.put("a", b"x" * (SEGMENT * 4)), InvalidArgumentError, "limit"),
    ("update too big", lambda s, p: s.update(p.live, b"x" * (s.max_body_bytes + 1)), InvalidArgumentError, "limit"),
    ("put_async too big", lambda s, p: s.put_async("a", b"x" * (s.max_body_bytes + 1)), InvalidArgumentError, "limit"),
    (
        "tx put too big",
        lambda s, p: s.transaction().put("a", b"x" * (s.max_body_bytes + 1)),
        InvalidArgumentError,
        "limit",
    ),
    # collection names
    ("put empty collection", lambda s, p: s.put("", b"x"), InvalidArgumentError, "empty"),
    ("put 256-byte collection", lambda s, p: s.put("n" * 256, b"x"), InvalidArgumentError, "255"),
    ("put 256-byte utf-8 collection", lambda s, p: s.put("é" * 128, b"x"), InvalidArgumentError, "255"),
    ("put_async empty collection", lambda s, p: s.put_async("", b"x"), InvalidArgumentError, "empty"),
    ("put_async 256-byte collection", lambda s, p: s.put_async("n" * 256, b"x"), InvalidArgumentError, "255"),
    ("tx put empty collection", lambda s, p: s.transaction().put("", b"x"), InvalidArgumentError, "empty"),
    # a lone surrogate (as surrogateescape decoding leaves) cannot be stored as UTF-8
    ("put surrogate collection", lambda s, p: s.put("a\udcff", b"x"), InvalidArgumentError, "surrogate"),
    ("put_async surrogate collection", lambda s, p: s.put_async("\ud800", b"x"), InvalidArgumentError, "surrogate"),
    ("tx put surrogate", lambda s, p: s.transaction().put("a\udcff", b"x"), InvalidArgumentError, "surrogate"),
    ("scan surrogate collection", lambda s, p: list(s.scan("a\udcff")), InvalidArgumentError, "surrogate"),
    ("handles surrogate collection", lambda s, p: list(s.handles("a\udcff")), InvalidArgumentError, "surrogate"),
    ("count surrogate collection", lambda s, p: s.count("é\udcff"), InvalidArgumentError, "surrogate"),
    # scan batch sizes
    ("scan batch 0", lambda s, p: list(s.scan("a", batch_size=0)), InvalidArgumentError, "batch_size"),
    ("handles batch -1", lambda s, p: list(s.handles("a", batch_size=-1)), InvalidArgumentError, "batch_size"),
]


@pytest.mark.parametrize(("call", "error", "message"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_call_raises_and_changes_nothing(
    populated: Populated,
    call: Callable[[FileStore, Populated], object],
    error: type[BaseException],
    message: str,
) -> None:
    with pytest.raises(error) as info:
        call(populated.store, populated)
    assert message in str(info.value)
    if issubclass(error, StoreError):
        assert isinstance(info.value, JmsStoreError)
    assert_unchanged(populated)


def test_oversized_body_inside_transaction_block_rolls_back(populated: Populated) -> None:
    s = populated.store
    with pytest.raises(InvalidArgumentError), s.transaction() as tx:
        tx.put("a", b"fine")
        tx.delete(populated.live)
        tx.put("a", b"x" * (s.max_body_bytes + 1))
    assert_unchanged(populated)


@pytest.mark.parametrize("bad", ["unknown", "deleted", "negative"])
def test_transaction_with_unknown_handle_is_rejected_whole(populated: Populated, bad: str) -> None:
    s = populated.store
    handle = {"unknown": populated.unknown, "deleted": populated.deleted, "negative": -3}[bad]
    with pytest.raises(UnknownHandleError), s.transaction() as tx:
        new = tx.put("a", b"new")
        tx.update(populated.live, b"changed")
        tx.delete(populated.b[0])
        tx.update(new, b"changed too")
        tx.delete(handle)
    assert new not in s
    assert s.read(populated.live) == b"a0 updated"
    assert_unchanged(populated)


def test_transaction_deleting_twice_is_rejected(populated: Populated) -> None:
    s = populated.store
    tx = s.transaction()
    tx.put("a", b"new")
    tx.delete(populated.live)
    tx.update(populated.live, b"after delete")
    with pytest.raises(UnknownHandleError):
        tx.commit()
    assert_unchanged(populated)


def test_transaction_used_after_commit(populated: Populated) -> None:
    s = populated.store
    tx = s.transaction()
    tx.commit()  # empty
    for use in (lambda: tx.put("a", b"x"), lambda: tx.update(populated.live, b"x"), lambda: tx.delete(populated.live)):
        with pytest.raises(InvalidArgumentError, match="already"):
            use()
    with pytest.raises(InvalidArgumentError, match="already"):
        tx.commit()
    assert_unchanged(populated)


def test_transaction_used_after_rollback(populated: Populated) -> None:
    tx = populated.store.transaction()
    tx.put("a", b"x")
    tx.rollback()
    with pytest.raises(InvalidArgumentError):
        tx.put("a", b"y")
    with pytest.raises(InvalidArgumentError):
        tx.commit()
    assert_unchanged(populated)


def test_failed_commit_cannot_be_retried(populated: Populated) -> None:
    tx = populated.store.transaction()
    tx.delete(populated.unknown)
    with pytest.raises(UnknownHandleError):
        tx.commit()
    with pytest.raises(InvalidArgumentError):
        tx.commit()
    assert_unchanged(populated)


CLOSED_CALLS: list[tuple[str, Callable[[FileStore, Populated], object]]] = [
    ("put", lambda s, p: s.put("a", b"x")),
    ("put_async", lambda s, p: s.put_async("a", b"x")),
    ("update", lambda s, p: s.update(p.live, b"x")),
    ("delete", lambda s, p: s.delete(p.live)),
    ("read", lambda s, p: s.read(p.live)),
    ("contains", lambda s, p: p.live in s),
    ("scan", lambda s, p: list(s.scan("a"))),
    ("transaction", lambda s, p: s.transaction()),
    ("compact", lambda s, p: s.compact()),
    ("flush", lambda s, p: s.flush()),
    ("stats", lambda s, p: s.stats()),
]


@pytest.mark.parametrize("call", [c[1] for c in CLOSED_CALLS], ids=[c[0] for c in CLOSED_CALLS])
def test_closed_store_raises_and_changes_nothing(populated: Populated, call: Callable[..., object]) -> None:
    populated.store.close()
    with pytest.raises(StoreClosedError, match="closed"):
        call(populated.store, populated)
    assert populated.reopen_snapshot() == populated.before


def test_second_open_is_locked_and_changes_nothing(populated: Populated) -> None:
    with pytest.raises(StoreLockedError) as info:
        FileStore(populated.path, max_segment_bytes=SEGMENT)
    assert str(populated.path) in str(info.value)
    assert isinstance(info.value, StoreError)
    # The first handle still works.
    assert populated.store.read(populated.live) == b"a0 updated"
    assert_unchanged(populated)


# --- bad options and paths ----------------------------------------------------------------------

BAD_OPTIONS: list[tuple[str, dict[str, Any], type[BaseException], str]] = [
    ("sync_policy", {"sync_policy": "fsync-sometimes"}, InvalidArgumentError, "fsync-sometimes"),
    ("sync_policy empty", {"sync_policy": ""}, InvalidArgumentError, "sync_policy"),
    ("codec", {"codec": "snappy"}, InvalidArgumentError, "snappy"),
    ("codec level", {"codec": "gzip-9"}, InvalidArgumentError, "gzip-9"),
    ("recovery", {"recovery": "lenient"}, InvalidArgumentError, "lenient"),
    ("compression_threshold", {"compression_threshold": -1}, InvalidArgumentError, "-1"),
    ("max_segment_bytes small", {"max_segment_bytes": 100}, InvalidArgumentError, "100"),
    ("max_segment_bytes 0", {"max_segment_bytes": 0}, InvalidArgumentError, "max_segment_bytes"),
    ("max_segment_bytes negative", {"max_segment_bytes": -1}, InvalidArgumentError, "-1"),
    ("max_segment_bytes huge", {"max_segment_bytes": 2**40}, InvalidArgumentError, str(2**40)),
    ("max_segment_bytes 2**64", {"max_segment_bytes": 2**64}, InvalidArgumentError, "max_segment_bytes"),
    (
        "max_body_bytes too big",
        {"max_segment_bytes": SEGMENT, "max_body_bytes": SEGMENT},
        InvalidArgumentError,
        "max_body_bytes",
    ),
    ("max_body_bytes negative", {"max_body_bytes": -1}, InvalidArgumentError, "-1"),
    ("sync_policy int", {"sync_policy": 1}, TypeError, ""),
    ("codec None", {"codec": None}, TypeError, ""),
    ("max_segment_bytes str", {"max_segment_bytes": "8192"}, TypeError, "max_segment_bytes"),
    ("max_segment_bytes float", {"max_segment_bytes": 8192.0}, TypeError, "max_segment_bytes"),
    ("compression_threshold bool", {"compression_threshold": True}, TypeError, "compression_threshold"),
    ("max_body_bytes str", {"max_body_bytes": "10"}, TypeError, "max_body_bytes"),
]


@pytest.mark.parametrize(("options", "error", "message"), [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_option_on_new_directory_creates_nothing(
    tmp_path: Path, options: dict[str, Any], error: type[BaseException], message: str
) -> None:
    path = tmp_path / "new"
    with pytest.raises(error) as info:
        FileStore(path, **options)
    assert message in str(info.value)
    assert not path.exists()


@pytest.mark.parametrize(("options", "error", "message"), [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_bad_option_on_existing_store_changes_nothing(
    populated: Populated, options: dict[str, Any], error: type[BaseException], message: str
) -> None:
    populated.store.close()
    files = dir_fingerprint(populated.path)
    with pytest.raises(error):
        FileStore(populated.path, **options)
    assert dir_fingerprint(populated.path) == files
    assert populated.reopen_snapshot() == populated.before


def _raising_progress(done: int, total: int) -> None:
    raise RuntimeError("the caller's progress callback failed")


@pytest.mark.parametrize("progress", [5, "x"], ids=["int", "str"])
def test_a_progress_callback_that_is_not_callable_is_refused(populated: Populated, progress: object) -> None:
    with pytest.raises(TypeError, match="progress"):
        populated.store.compact(progress)  # type: ignore[arg-type]
    populated.store.close()
    with pytest.raises(TypeError, match="progress"):
        FileStore(populated.path, progress=progress)  # type: ignore[arg-type]
    assert populated.reopen_snapshot() == populated.before


def test_a_progress_callback_that_raises_raises_to_the_caller(populated: Populated) -> None:
    """The callback's own error reaches whoever passed it (not a line on
    stderr while the call goes on as if nothing happened); what compaction
    did is crash-safe at every step, and an open that raises closes again."""
    with pytest.raises(RuntimeError, match="progress callback failed"):
        populated.store.compact(_raising_progress)
    assert take(populated.store) == populated.before
    populated.store.close()
    with pytest.raises(RuntimeError, match="progress callback failed"):
        FileStore(populated.path, max_segment_bytes=SEGMENT, progress=_raising_progress)
    assert populated.reopen_snapshot() == populated.before  # not left locked or changed


def test_path_is_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"not a store")
    with pytest.raises(InvalidArgumentError) as info:
        FileStore(path)
    assert str(path) in str(info.value)
    assert "not a directory" in str(info.value)
    assert path.read_bytes() == b"not a store"


def test_parent_is_a_regular_file(tmp_path: Path) -> None:
    parent = tmp_path / "file"
    parent.write_bytes(b"x")
    with pytest.raises(StoreError) as info:
        FileStore(parent / "store")
    assert str(parent / "store") in str(info.value)
    assert isinstance(info.value, JmsStoreError)
    assert parent.read_bytes() == b"x"


def test_empty_path_is_refused_and_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError) as info:
        FileStore("")
    assert "empty" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_path_with_a_nul_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        FileStore(str(tmp_path / "a\0b"))
    assert list(tmp_path.iterdir()) == []


def test_path_of_wrong_type() -> None:
    with pytest.raises(TypeError):
        FileStore(42)  # type: ignore[arg-type]


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def test_read_only_directory(tmp_path: Path) -> None:
    if _is_root():
        # Permissions do not stop root: use places no one can create a directory in.
        for path in (Path("/proc/jmsstore-test/store"), tmp_path / "file" / "store"):
            if path.parent.name == "file":
                path.parent.write_bytes(b"x")
            with pytest.raises(StoreError) as info:
                FileStore(path)
            assert str(path) in str(info.value)
            assert not path.exists()
        return
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
    try:
        with pytest.raises(StoreError) as info:
            FileStore(parent / "store")
        assert str(parent / "store") in str(info.value)
        assert list(parent.iterdir()) == []
    finally:
        parent.chmod(0o700)


def test_store_files_are_owner_only(populated: Populated) -> None:
    populated.store.close()
    assert stat.S_IMODE(populated.path.stat().st_mode) & 0o077 == 0
    for p in populated.path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p


# --- the exception classes ----------------------------------------------------------------------


def test_exception_classes() -> None:
    assert issubclass(UnknownHandleError, InvalidArgumentError)
    for cls in (InvalidArgumentError, StoreClosedError, StoreLockedError, jmsstore.CorruptionError):
        assert issubclass(cls, StoreError)
    assert issubclass(StoreError, JmsStoreError)
    assert issubclass(JmsStoreError, Exception)
    assert not issubclass(JmsStoreError, (TypeError, ValueError))
