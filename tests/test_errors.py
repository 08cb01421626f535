"""The exception hierarchy, and that the engine raises the exported classes."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import jmsstore
import jmsstore._native
import jmsstore.errors
import pytest
from jmsstore import (
    CorruptionError,
    FileStore,
    InvalidArgumentError,
    JmsStoreError,
    StoreClosedError,
    StoreError,
    StoreIOError,
    StoreLockedError,
    UnknownHandleError,
    UnsupportedFormatError,
    inspect,
)

ERROR_NAMES = list(jmsstore.errors.__all__)
ERROR_CLASSES = [getattr(jmsstore.errors, name) for name in ERROR_NAMES]
# The broker's errors are Python classes under JMSError; the store's come from the native module.
JMS_ERROR_NAMES = [n for n in ERROR_NAMES if issubclass(getattr(jmsstore.errors, n), jmsstore.errors.JMSError)]
STORE_ERROR_NAMES = [n for n in ERROR_NAMES if n not in JMS_ERROR_NAMES and n != "ConfigError"]
SEGMENT = 8192


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as the segment headers use."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_crc32c_helper() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_all_lists_every_error_class() -> None:
    expected = {
        "CorruptionError",
        "InvalidArgumentError",
        "JmsStoreError",
        "StoreClosedError",
        "StoreError",
        "StoreFullError",
        "StoreIOError",
        "StoreLockedError",
        "StorePoisonedError",
        "UnknownHandleError",
        "UnsupportedFormatError",
        "JMSError",
        "IllegalStateError",
        "DestinationPausedError",
        "ConfigError",
        "InvalidDestinationError",
        "InvalidClientIDError",
        "MessageFormatError",
        "MessageNotWriteableError",
        "ResourceAllocationError",
        "ServerNotFoundError",
        "MessageTooLargeError",
        "TransactionRolledBackError",
    }
    assert set(ERROR_NAMES) == expected
    assert len(ERROR_NAMES) == len(set(ERROR_NAMES))


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_derives_from_jmsstoreerror(name: str) -> None:
    cls = getattr(jmsstore.errors, name)
    assert isinstance(cls, type)
    assert issubclass(cls, JmsStoreError)
    assert issubclass(cls, Exception)
    if name in JMS_ERROR_NAMES or name == "ConfigError":
        assert not issubclass(cls, StoreError)
    elif cls is not JmsStoreError:
        assert issubclass(cls, StoreError)
    # The same class object everywhere: the package, the errors module and (store errors) the native module.
    assert getattr(jmsstore, name) is cls
    if name in STORE_ERROR_NAMES:
        assert getattr(jmsstore._native, name) is cls
    assert name in jmsstore.__all__
    # Raisable and catchable with a message.
    args = ("jms.toml", "servers.s", "a message") if name == "ConfigError" else ("a message",)
    with pytest.raises(JmsStoreError, match="a message"):
        raise cls(*args)


def test_specific_parents() -> None:
    assert UnknownHandleError.__mro__[1] is InvalidArgumentError
    assert InvalidArgumentError.__mro__[1] is StoreError
    assert StoreError.__mro__[1] is JmsStoreError
    assert JmsStoreError.__mro__[1] is Exception
    for name in (
        "CorruptionError",
        "StoreLockedError",
        "StoreClosedError",
        "StorePoisonedError",
        "StoreFullError",
        "StoreIOError",
        "UnsupportedFormatError",
    ):
        assert getattr(jmsstore.errors, name).__mro__[1] is StoreError, name
    assert not issubclass(StoreError, (OSError, ValueError, TypeError))
    from jmsstore.errors import JMSError, MessageTooLargeError, ResourceAllocationError

    assert JMSError.__mro__[1] is JmsStoreError
    assert MessageTooLargeError.__mro__[1] is ResourceAllocationError
    for name in JMS_ERROR_NAMES:
        if name not in ("JMSError", "MessageTooLargeError", "DestinationPausedError"):
            assert getattr(jmsstore.errors, name).__mro__[1] is JMSError, name
    from jmsstore.errors import DestinationPausedError, IllegalStateError

    assert DestinationPausedError.__mro__[1] is IllegalStateError


@pytest.mark.parametrize("name", ["StoreError", "UnknownHandleError", "CorruptionError"])
def test_errors_pickle_round_trip(name: str) -> None:
    cls = getattr(jmsstore.errors, name)
    assert cls.__module__ in ("jmsstore._native", "jmsstore.errors", "jmsstore")
    copy = pickle.loads(pickle.dumps(cls("unknown handle 5")))
    assert type(copy) is cls
    assert str(copy) == "unknown handle 5"


# --- what the engine raises ----------------------------------------------------------------------


def test_engine_raises_unknown_handle(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        with pytest.raises(UnknownHandleError) as info:
            store.read(12345)
        assert type(info.value) is UnknownHandleError
        assert "12345" in str(info.value)
        h = store.put("a", b"x")
        store.delete(h)
        with pytest.raises(UnknownHandleError):
            store.update(h, b"y")


def test_engine_raises_invalid_argument(store_dir: Path) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        FileStore(store_dir, codec="brotli")
    assert type(info.value) is InvalidArgumentError
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store, pytest.raises(InvalidArgumentError) as info:
        store.put("", b"x")
    assert type(info.value) is InvalidArgumentError


def test_engine_raises_closed_and_locked(store_dir: Path) -> None:
    store = FileStore(store_dir, max_segment_bytes=SEGMENT)
    with pytest.raises(StoreLockedError) as locked:
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    assert type(locked.value) is StoreLockedError
    store.close()
    with pytest.raises(StoreClosedError) as closed:
        store.put("a", b"x")
    assert type(closed.value) is StoreClosedError


def test_engine_raises_io_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(StoreIOError) as info:
        FileStore(tmp_path / "file" / "store")
    assert type(info.value) is StoreIOError
    assert "file/store" in str(info.value)


def _store_with_records(path: Path) -> list[inspect.Record]:
    with FileStore(path, max_segment_bytes=SEGMENT) as store:
        for i in range(5):
            store.put("orders", b"order %d " % i * 10)
    # The five puts; the close mark that ends a cleanly closed journal is not an object.
    return [r for r in inspect.records(path) if r.type != "close"]


def test_corrupt_record_fails_open_naming_segment_and_offset(store_dir: Path) -> None:
    records = _store_with_records(store_dir)
    victim = records[1]  # a record with later, synced records behind it: not a torn tail
    seg = inspect.segments(store_dir)[0]
    assert seg["number"] == victim.segment
    seg_path = Path(seg["path"])
    data = bytearray(seg_path.read_bytes())
    data[victim.offset + victim.length - 3] ^= 0xFF  # inside the body
    seg_path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError) as info:
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    assert type(info.value) is CorruptionError
    message = str(info.value)
    assert seg_path.name in message
    assert f"offset {victim.offset}" in message
    # Failing the open left the store as it was: still locked by no one, still corrupt.
    with pytest.raises(CorruptionError):
        FileStore(store_dir, max_segment_bytes=SEGMENT)


def test_corrupt_segment_header_fails_open(store_dir: Path) -> None:
    _store_with_records(store_dir)
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        store.put("orders", b"in the second segment")
    seg_path = Path(inspect.segments(store_dir)[0]["path"])
    data = bytearray(seg_path.read_bytes())
    data[20] ^= 0x01  # inside the store id: the header checksum fails
    seg_path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError) as info:
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    assert seg_path.name in str(info.value)
    assert "offset 0" in str(info.value)


def test_newer_format_version_is_unsupported(store_dir: Path) -> None:
    _store_with_records(store_dir)
    seg_path = Path(inspect.segments(store_dir)[0]["path"])
    data = bytearray(seg_path.read_bytes())
    data[8:10] = struct.pack("<H", 3)
    data[76:80] = struct.pack("<I", crc32c(bytes(data[:76])))
    seg_path.write_bytes(bytes(data))
    with pytest.raises(UnsupportedFormatError) as info:
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    assert type(info.value) is UnsupportedFormatError
    assert seg_path.name in str(info.value)
    assert "version 3" in str(info.value)
    with pytest.raises(UnsupportedFormatError):
        inspect.segments(store_dir)


def test_errors_from_put_async_are_raised_at_once(store_dir: Path) -> None:
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:
        with pytest.raises(InvalidArgumentError):
            store.put_async("a", b"x" * (store.max_body_bytes + 1))
        fut = store.put_async("a", b"fine")
        assert fut.exception(timeout=60) is None


def test_salvage_keeps_every_intact_record(store_dir: Path) -> None:
    records = _store_with_records(store_dir)
    handles = [r.handle for r in records]
    victim = records[1]
    seg_path = Path(inspect.segments(store_dir)[0]["path"])
    data = bytearray(seg_path.read_bytes())
    data[victim.offset + victim.length - 3] ^= 0xFF
    seg_path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError):
        FileStore(store_dir, max_segment_bytes=SEGMENT)
    with FileStore(store_dir, max_segment_bytes=SEGMENT, recovery="salvage") as store:
        report = store.recovery_report
        assert len(report["damaged"]) == 1
        damaged = report["damaged"][0]
        assert damaged["segment"] == victim.segment
        assert damaged["ranges"] == [(victim.offset, victim.offset + victim.length)]
        assert Path(damaged["path"]).parent.name == "attic"
        assert damaged["live_records_kept"] == len(handles) - 1
        assert victim.handle not in store
        for r in records:
            if r.handle != victim.handle:
                assert store.read(r.handle) == r.body
    with FileStore(store_dir, max_segment_bytes=SEGMENT) as store:  # strict again: the damage is gone
        assert store.count("orders") == len(handles) - 1
    assert (store_dir / "attic" / seg_path.name).exists()
