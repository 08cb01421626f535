"""The binding of the core's MESSAGE frame writer
(``encode_message_frames``), the STOMP dispatcher's common case: for any
message it takes, it writes, byte for byte, the frame the Python mapping
(``message_frame``) writes; what it declines the dispatcher writes in
Python."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jmsstore._native import encode_message_frames
from jmsstore.errors import JmsStoreError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic
from jmsstore.jms.message import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    TextMessage,
    check_property_name,
    decode_delivered,
    encode,
)
from jmsstore.net.stomp.frames import FrameError
from jmsstore.net.stomp.frames import encode as encode_frame
from jmsstore.net.stomp.mapping import message_frame


@dataclass
class Delivery:
    """What the writer reads of a delivery: the encoded message and its redelivery count."""

    body: bytes
    redelivery_count: int


def reply_destination(text: object) -> Destination | None:
    """A ``kind:name`` reply-to as the server's port reads it."""
    kind, _, name = str(text).partition(":")
    return {"queue": Queue, "topic": Topic, "temp-queue": TemporaryQueue}[kind](name)


def is_property_name(name: str) -> bool:
    try:
        check_property_name(name)
    except JmsStoreError:
        return False
    return True


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
PROPERTY_VALUES = st.one_of(TEXT, st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), st.floats())
NAMES = st.from_regex(r"[a-zA-Z_$][a-zA-Z0-9_$]{0,6}", fullmatch=True).filter(is_property_name)
DESTINATION_NAMES = st.from_regex(r"[A-Za-z0-9_.$-][A-Za-z0-9_.$:-]{0,7}", fullmatch=True)
REPLY_TO = st.one_of(
    st.none(),
    st.builds(Queue, DESTINATION_NAMES),
    st.builds(Topic, DESTINATION_NAMES),
    st.builds(TemporaryQueue, DESTINATION_NAMES),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["text", "bytes", "map", "empty"]))
    message: Message
    if kind == "text":
        message = TextMessage(draw(st.one_of(st.none(), TEXT)))
    elif kind == "bytes":
        message = BytesMessage(draw(st.binary(max_size=20)))
    elif kind == "map":
        message = MapMessage({"k": 1})
    else:
        message = Message()
    for name, value in draw(st.dictionaries(NAMES, PROPERTY_VALUES, max_size=4)).items():
        message.set_property(name, value)
    message.type = draw(st.one_of(st.none(), TEXT))
    message.correlation_id = draw(st.one_of(st.none(), TEXT))
    message.reply_to = draw(REPLY_TO)
    message.message_id = draw(st.one_of(st.none(), st.just("ID:jms1-1"), TEXT))
    message.delivery_mode = draw(st.sampled_from([DeliveryMode.PERSISTENT, DeliveryMode.NON_PERSISTENT]))
    message.priority = draw(st.integers(0, 9))
    message.timestamp = draw(st.integers(0, 1 << 45))
    message.expiration = draw(st.integers(0, 1 << 45))
    return message


def python_frames(deliveries: list[Delivery], destination: str | None, first: int, recalls: int) -> bytes:
    frames = []
    for n, delivery in enumerate(deliveries, first):
        message = decode_delivered(delivery.body, delivery.redelivery_count + 1, Queue("a"), None, reply_destination)
        frames.append(encode_frame(message_frame(message, "sub-1", f"3.{n}", destination, recalls)))
    return b"".join(frames)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(messages(), st.integers(0, 3)), min_size=1, max_size=3),
    st.sampled_from([None, "/temp-queue/mine"]),
    st.integers(1, 1 << 40),
    st.integers(0, 3),
)
def test_the_native_frames_are_the_python_frames(
    sent: list[tuple[Message, int]], destination: str | None, first: int, recalls: int
) -> None:
    deliveries = [Delivery(encode(message), count) for message, count in sent]
    native = encode_message_frames(deliveries, "sub-1", destination or "/queue/a", "3.", first, recalls)
    declined = any(isinstance(value, float) for message, _ in sent for value in message.properties.values()) or any(
        "\x00" in text for message, _ in sent for text in header_texts(message)
    )
    if declined:
        assert native is None
        return
    assert native == python_frames(deliveries, destination, first, recalls)


def header_texts(message: Message) -> list[str]:
    texts = [message.type, message.correlation_id, message.message_id, *map(str, message.properties.values())]
    return [t for t in texts if t is not None]


def test_a_message_with_a_nul_in_a_header_is_left_to_the_python_encoder_which_refuses_it() -> None:
    message = TextMessage("hi")
    message.type = "a\x00b"
    deliveries = [Delivery(encode(message), 0)]
    assert encode_message_frames(deliveries, "sub-1", "/queue/a", "3.", 1, 0) is None
    try:
        python_frames(deliveries, None, 1, 0)
    except FrameError as error:
        assert "NUL" in str(error)
    else:
        raise AssertionError("the Python encoder wrote a NUL in a header")


def test_a_double_property_is_left_to_python_which_writes_it_as_java_reads_it() -> None:
    message = TextMessage("hi")
    message.set_property("price", 1e16)
    deliveries = [Delivery(encode(message), 0)]
    assert encode_message_frames(deliveries, "sub-1", "/queue/a", "3.", 1, 0) is None
    assert b"\nprice:1e+16\n" in python_frames(deliveries, None, 1, 0)


def test_one_declined_message_leaves_the_whole_batch_to_python() -> None:
    plain, double = TextMessage("a"), TextMessage("b")
    double.set_property("x", 0.5)
    deliveries = [Delivery(encode(plain), 0), Delivery(encode(double), 0)]
    assert encode_message_frames(deliveries, "sub-1", "/queue/a", "3.", 1, 0) is None
    assert encode_message_frames(deliveries[:1], "sub-1", "/queue/a", "3.", 1, 0) == python_frames(
        deliveries[:1], None, 1, 0
    )


def test_what_the_binding_takes_and_refuses() -> None:
    message = TextMessage("hi")
    good = Delivery(encode(message), 0)
    # Any iterable of deliveries; an empty one is no frames at all.
    assert encode_message_frames(iter([good]), "s", "/queue/a", "1.", 1, 0) == encode_message_frames(
        [good], "s", "/queue/a", "1.", 1, 0
    )
    assert encode_message_frames([], "s", "/queue/a", "1.", 1, 0) == b""
    # A body that is not bytes is left to the Python writer.
    assert encode_message_frames([Delivery(bytearray(good.body), 0)], "s", "/queue/a", "1.", 1, 0) is None  # type: ignore[arg-type]
    # Something that is not a delivery is a TypeError or AttributeError, not a crash.
    with pytest.raises(AttributeError):
        encode_message_frames([object()], "s", "/queue/a", "1.", 1, 0)
    with pytest.raises(TypeError):
        encode_message_frames(5, "s", "/queue/a", "1.", 1, 0)  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        encode_message_frames([good], "s", "/queue/a", "1.", -1, 0)
