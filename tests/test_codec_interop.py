"""Bodies the store compresses are readable by standard tools.

Every compressed body on disk must be in the codec's ordinary format, so other
tools can read a store's bodies:

* gzip (any level): RFC 1952, readable by Python's ``gzip`` module;
* zstd: a zstd frame, readable by ``zstandard``;
* lzf: the "ZV" chunk framing of ning/compress and the ``lzf`` tool, whose
  compressed chunks are liblzf blocks, readable by ``python-lzf``.

The other direction (bodies compressed by those tools decode in the store) is
covered by the Rust known-answer tests in ``jmsstore-core/src/codec``: Python
cannot write arbitrary records.

Needs the test dependencies ``hypothesis``, ``python-lzf`` and ``zstandard``.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jmsstore.inspect
import lzf
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from jmsstore import FileStore

ALL_CODECS = ["none", "gzip", "gzip-best", "gzip-speed", "lzf", "zstd"]
# The codec name recorded for bodies a store's codec actually compressed.
RECORDED_NAME = {
    "gzip": "gzip",
    "gzip-best": "gzip",
    "gzip-speed": "gzip",
    "lzf": "lzf",
    "zstd": "zstd",
}
COLLECTION = "orders"

# Sizes around LZF's 65535-byte chunk limit, and several chunks' worth.
COMPRESSIBLE_SIZES = [1_000, 20_000, 65_534, 65_535, 65_536, 200_000]


def json_body(size: int, seed: int = 0) -> bytes:
    """Message-like JSON of exactly `size` bytes: the same keys over and over."""
    parts: list[bytes] = []
    total = 0
    i = seed
    while total < size:
        record = json.dumps(
            {
                "orderId": 100_000 + i,
                "customer": f"cust-{i * 7 % 10_000:05d}",
                "status": ["NEW", "PAID", "SHIPPED"][i % 3],
                "amount": round(i * 13 % 1000 + (i % 100) / 100, 2),
                "items": [{"sku": f"SKU-{i * 31 % 5000:04d}", "qty": i % 9 + 1}],
            }
        ).encode()
        parts.append(record + b"\n")
        total += len(record) + 1
        i += 1
    return b"".join(parts)[:size]


def store_dir(parent: Path) -> Path:
    path = parent / "store"
    path.mkdir(parents=True)
    return path


def write_bodies(path: Path, codec: str, bodies: list[bytes], threshold: int = 0) -> dict[int, bytes]:
    """Puts `bodies` in a fresh store; returns handle -> body, after checking reads."""
    written: dict[int, bytes] = {}
    store = FileStore(str(path), codec=codec, compression_threshold=threshold, max_segment_bytes=1 << 20)
    with store:
        for body in bodies:
            handle = store.put(COLLECTION, body)
            written[handle] = body
        for handle, body in written.items():
            assert store.read(handle) == body
    return written


def put_records(path: Path) -> Iterator[Any]:
    """The put records of our collection, checked for integrity."""
    for rec in jmsstore.inspect.records(str(path)):
        if rec.type == "put" and rec.collection == COLLECTION:
            assert rec.checksum_ok, f"checksum failed at {rec.segment}:{rec.offset}"
            assert rec.codec in ("none", "gzip", "lzf", "zstd"), rec.codec
            yield rec


def records_by_handle(path: Path, written: dict[int, bytes]) -> dict[int, Any]:
    records = {rec.handle: rec for rec in put_records(path)}
    assert set(records) == set(written)
    for handle, rec in records.items():
        assert rec.body == written[handle]
    return records


def zv_chunks(stored: bytes) -> list[bytes]:
    """Splits a ZV-framed LZF body into its chunks' contents, decompressing
    compressed chunks with python-lzf."""
    chunks: list[bytes] = []
    pos = 0
    while pos < len(stored):
        assert stored[pos : pos + 2] == b"ZV", f"bad chunk magic at byte {pos}"
        kind = stored[pos + 2]
        if kind == 0:
            (length,) = struct.unpack_from(">H", stored, pos + 3)
            data = stored[pos + 5 : pos + 5 + length]
            assert len(data) == length, f"truncated stored chunk at byte {pos}"
            chunks.append(data)
            pos += 5 + length
        elif kind == 1:
            compressed_len, raw_len = struct.unpack_from(">HH", stored, pos + 3)
            data = stored[pos + 7 : pos + 7 + compressed_len]
            assert len(data) == compressed_len, f"truncated compressed chunk at byte {pos}"
            # A compressed chunk must pay for its two extra header bytes.
            assert compressed_len + 2 < raw_len
            chunk = lzf.decompress(data, raw_len)
            assert chunk is not None, f"python-lzf rejected the chunk at byte {pos}"
            assert len(chunk) == raw_len
            chunks.append(chunk)
            pos += 7 + compressed_len
        else:
            raise AssertionError(f"unknown chunk type {kind} at byte {pos}")
    return chunks


def unframe_zv(stored: bytes) -> bytes:
    """Decodes a ZV-framed LZF body with python-lzf."""
    return b"".join(zv_chunks(stored))


def decode_with_python(codec_name: str, raw_body: bytes, length: int) -> bytes:
    """Decodes a stored body with the standard Python tools."""
    if codec_name == "none":
        return raw_body
    if codec_name == "gzip":
        return gzip.decompress(raw_body)
    if codec_name == "zstd":
        return zstandard.ZstdDecompressor().decompress(raw_body, max_output_size=max(length, 1))
    if codec_name == "lzf":
        return unframe_zv(raw_body)
    raise AssertionError(f"unexpected codec {codec_name!r}")


# ---------------------------------------------------------------- per codec


def test_lzf_bodies_are_zv_chunks_readable_by_python_lzf(tmp_path: Path) -> None:
    path = store_dir(tmp_path)
    bodies = [json_body(size, seed) for seed, size in enumerate(COMPRESSIBLE_SIZES)]
    bodies.append(b"abc" * 50_000)
    bodies.append(bytes(100_000))
    written = write_bodies(path, "lzf", bodies)

    records = records_by_handle(path, written)
    for handle, rec in records.items():
        body = written[handle]
        assert rec.codec == "lzf", f"a compressible {len(body)}-byte body was stored {rec.codec}"
        assert len(rec.raw_body) < len(body)
        chunks = zv_chunks(rec.raw_body)
        assert b"".join(chunks) == body == rec.body
        # Full chunks of 65535 bytes, then the rest.
        assert [len(c) for c in chunks[:-1]] == [0xFFFF] * (len(chunks) - 1)
        assert 0 < len(chunks[-1]) <= 0xFFFF


@pytest.mark.parametrize("codec", ["gzip", "gzip-best", "gzip-speed"])
def test_gzip_bodies_are_rfc1952(tmp_path: Path, codec: str) -> None:
    path = store_dir(tmp_path)
    bodies = [json_body(size, seed) for seed, size in enumerate(COMPRESSIBLE_SIZES)]
    written = write_bodies(path, codec, bodies)

    for handle, rec in records_by_handle(path, written).items():
        body = written[handle]
        assert rec.codec == "gzip"
        assert rec.raw_body[:2] == b"\x1f\x8b"
        assert len(rec.raw_body) < len(body)
        assert gzip.decompress(rec.raw_body) == body == rec.body


def test_gzip_levels_differ(tmp_path: Path) -> None:
    body = json_body(200_000)
    sizes: dict[str, int] = {}
    for codec in ["gzip-best", "gzip-speed"]:
        path = store_dir(tmp_path / codec)
        write_bodies(path, codec, [body])
        (rec,) = put_records(path)
        sizes[codec] = len(rec.raw_body)
    assert sizes["gzip-best"] < sizes["gzip-speed"]


def test_zstd_bodies_are_zstd_frames(tmp_path: Path) -> None:
    path = store_dir(tmp_path)
    bodies = [json_body(size, seed) for seed, size in enumerate(COMPRESSIBLE_SIZES)]
    written = write_bodies(path, "zstd", bodies)

    for handle, rec in records_by_handle(path, written).items():
        body = written[handle]
        assert rec.codec == "zstd"
        assert rec.raw_body[:4] == b"\x28\xb5\x2f\xfd"
        assert len(rec.raw_body) < len(body)
        decompressor = zstandard.ZstdDecompressor()
        assert decompressor.decompress(rec.raw_body, max_output_size=len(body)) == body
        # The frame records its content size, so no bound is needed either.
        assert decompressor.decompress(rec.raw_body) == body == rec.body


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_incompressible_body_is_stored_raw(tmp_path: Path, codec: str) -> None:
    path = store_dir(tmp_path)
    bodies = [os.urandom(n) for n in (1, 100, 4096, 70_000)] + [b"", b"x"]
    written = write_bodies(path, codec, bodies)

    for handle, rec in records_by_handle(path, written).items():
        assert rec.codec == "none"
        assert rec.raw_body == written[handle] == rec.body


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != "none"])
def test_compression_threshold(tmp_path: Path, codec: str) -> None:
    path = store_dir(tmp_path)
    at_threshold = json_body(4096, 1)
    above_threshold = json_body(4097, 2)
    written = write_bodies(path, codec, [at_threshold, above_threshold], threshold=4096)

    for handle, rec in records_by_handle(path, written).items():
        body = written[handle]
        if len(body) == len(at_threshold):
            assert rec.codec == "none"
            assert rec.raw_body == body
        else:
            assert rec.codec == RECORDED_NAME[codec]
            assert decode_with_python(rec.codec, rec.raw_body, len(body)) == body


def test_codec_none_never_compresses(tmp_path: Path) -> None:
    path = store_dir(tmp_path)
    bodies = [json_body(size) for size in COMPRESSIBLE_SIZES]
    written = write_bodies(path, "none", bodies)
    for handle, rec in records_by_handle(path, written).items():
        assert rec.codec == "none"
        assert rec.raw_body == written[handle]


# ---------------------------------------------------------------- properties


@st.composite
def compressible_bodies(draw: st.DrawFn) -> bytes:
    """Random snippets, each repeated a few times, in random order."""
    snippets = draw(st.lists(st.binary(min_size=1, max_size=48), min_size=1, max_size=8))
    picks = draw(
        st.lists(
            st.tuples(st.integers(0, len(snippets) - 1), st.integers(1, 60)),
            max_size=200,
        )
    )
    return b"".join(snippets[i] * times for i, times in picks)


def round_trip(codec: str, bodies: list[bytes]) -> None:
    """Writes and reads back `bodies`, then checks each record with Python's tools."""
    with tempfile.TemporaryDirectory() as parent:
        path = store_dir(Path(parent))
        written = write_bodies(path, codec, bodies)
        for handle, rec in records_by_handle(path, written).items():
            body = written[handle]
            if rec.codec == "none":
                assert rec.raw_body == body
            else:
                assert rec.codec == RECORDED_NAME[codec]
                assert len(rec.raw_body) < len(body)
            assert decode_with_python(rec.codec, rec.raw_body, len(body)) == body


@pytest.mark.parametrize("codec", ALL_CODECS)
@settings(max_examples=25, deadline=None)
@given(bodies=st.lists(st.binary(max_size=100_000), min_size=1, max_size=4))
def test_round_trip_arbitrary_bodies(codec: str, bodies: list[bytes]) -> None:
    round_trip(codec, bodies)


@pytest.mark.parametrize("codec", ALL_CODECS)
@settings(max_examples=25, deadline=None)
@given(bodies=st.lists(compressible_bodies(), min_size=1, max_size=4))
def test_round_trip_compressible_bodies(codec: str, bodies: list[bytes]) -> None:
    round_trip(codec, bodies)
