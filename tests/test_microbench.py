"""pytest-benchmark microbenchmarks of the hot paths: store put, codec
encode/decode, selector evaluation, message encode/decode.

The normal test run has ``--benchmark-disable`` (pyproject): each runs once,
as a test, and its result is checked. Measure with
``python -m pytest tests/test_microbench.py --benchmark-enable``
(``--benchmark-json FILE`` to keep the figures); timings are reported,
never asserted.
"""

from __future__ import annotations

from typing import Any

import pytest
from jmsstore import FileStore, _native
from jmsstore.bench import bodies
from jmsstore.jms.message import MapMessage, TextMessage, decode, encode
from jmsstore.selector import Selector

BODY = 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with FileStore(tmp_path_factory.mktemp("micro") / "store", sync_policy="disabled") as fs:
        yield fs


def test_store_put(benchmark: Any, store: FileStore) -> None:
    body = bodies.random_body(BODY, seed=1)
    handle = benchmark(store.put, "micro", body)
    assert store.read(handle) == body


def test_store_put_async(benchmark: Any, store: FileStore) -> None:
    body = bodies.random_body(BODY, seed=2)

    def put_1000() -> int:
        futures = [store.put_async("micro-async", body) for _ in range(1000)]
        return [f.result() for f in futures][-1]

    handle = benchmark(put_1000)
    assert store.read(handle) == body


@pytest.mark.parametrize("codec", ["lzf", "zstd", "gzip"])
@pytest.mark.parametrize("kind", ["json", "random"])
def test_codec_encode(benchmark: Any, codec: str, kind: str) -> None:
    data = bodies.json_body(16 * 1024, seed=3) if kind == "json" else bodies.random_body(16 * 1024, seed=3)
    packed = benchmark(_native.compress, codec, data)
    if kind == "json":
        assert len(packed) < len(data)  # a JSON-like body compresses
    name = "gzip" if codec.startswith("gzip") else codec
    assert _native.decompress(name, packed, len(data)) == data


@pytest.mark.parametrize("codec", ["lzf", "zstd", "gzip"])
def test_codec_decode(benchmark: Any, codec: str) -> None:
    data = bodies.json_body(16 * 1024, seed=4)
    packed = _native.compress(codec, data)
    assert benchmark(_native.decompress, codec, packed, len(data)) == data


SELECTORS = {
    "equality": "color = 'red'",
    "compound": "color IN ('red', 'blue') AND weight BETWEEN 10 AND 20 AND JMSPriority > 3",
    "like": "region LIKE 'eu-%' ESCAPE '\\' OR name IS NULL",
    "arithmetic": "price * quantity - discount > 100.5",
}


@pytest.mark.parametrize("name", list(SELECTORS))
def test_selector_evaluation(benchmark: Any, name: str) -> None:
    selector = Selector(SELECTORS[name])
    headers = {"JMSPriority": 4, "JMSDeliveryMode": "PERSISTENT", "JMSMessageID": "ID:a-1-1"}
    properties = {
        "color": "red",
        "weight": 12,
        "region": "eu-west",
        "name": "n",
        "price": 20.0,
        "quantity": 6,
        "discount": 1,
    }
    assert benchmark(selector.matches, headers, properties) is True


def _message() -> TextMessage:
    message = TextMessage(bodies.json_body(BODY, seed=5).decode())
    for i in range(8):
        message.set_property(f"p{i}", i if i % 2 else f"value {i}")
    message.message_id = "ID:jms1-1-1"
    message.correlation_id = "corr"
    return message


def test_message_encode(benchmark: Any) -> None:
    message = _message()
    data = benchmark(encode, message)
    assert decode(data).text == message.text  # type: ignore[attr-defined]


def test_message_decode(benchmark: Any) -> None:
    message = _message()
    decoded = benchmark(decode, encode(message))
    assert decoded.get_property("p3") == 3 and decoded.message_id == "ID:jms1-1-1"


def test_map_message_round_trip(benchmark: Any) -> None:
    message = MapMessage({f"k{i}": (i, float(i), str(i), bool(i % 2))[i % 4] for i in range(32)})
    decoded = benchmark(lambda: decode(encode(message)))
    assert dict(decoded) == dict(message)  # type: ignore[call-overload]
