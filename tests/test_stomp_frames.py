"""STOMP 1.2 frames: parsing (whole and split anywhere), escaping, limits
enforced as bytes arrive, encoding, and agreement with stomp.py's own frame
code."""

from __future__ import annotations

import itertools
import pickle

import pytest
import stomp.protocol
import stomp.utils
from hypothesis import given, settings
from hypothesis import strategies as st
from jmsstore.errors import InvalidArgumentError, JmsStoreError
from jmsstore.net.stomp import (
    ALL_COMMANDS,
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Command,
    Frame,
    FrameError,
    FrameLimits,
    FrameParser,
    encode,
    error_frame,
)


def parse(data: bytes, limits: FrameLimits | None = None) -> list[Frame]:
    return FrameParser(limits).feed(data)


def parse_one(data: bytes) -> Frame:
    frames = parse(data)
    assert len(frames) == 1, frames
    return frames[0]


def refused(data: bytes, match: str, limits: FrameLimits | None = None) -> FrameError:
    with pytest.raises(FrameError, match=match) as caught:
        parse(data, limits)
    return caught.value


# ------------------------------------------------------------------ the specification's examples


def test_the_specifications_connect_send_and_message_examples() -> None:
    connect = parse_one(b"CONNECT\naccept-version:1.2\nhost:stomp.github.org\n\n\x00")
    assert connect == Frame("CONNECT", [("accept-version", "1.2"), ("host", "stomp.github.org")])
    assert connect.command is Command.CONNECT

    send = parse_one(b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\n\x00")
    assert send.command == "SEND"
    assert send.header("destination") == "/queue/a"
    assert send.body == b"hello queue a\n"

    message = parse_one(
        b"MESSAGE\nsubscription:0\nmessage-id:007\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\x00"
    )
    assert message.header_map() == {
        "subscription": "0",
        "message-id": "007",
        "destination": "/queue/a",
        "content-type": "text/plain",
    }
    assert message.body == b"hello queue a"


def test_the_specifications_error_example_with_content_length() -> None:
    body = b"The message:\n-----\nMESSAGE\ndestined:/queue/a\nreceipt:message-12345\n\nHello queue a!\n-----\nDid not contain a destination header, which is REQUIRED\nfor message propagation.\n"  # noqa: E501
    data = (
        b"ERROR\nreceipt-id:message-12345\ncontent-type:text/plain\ncontent-length:%d\n"
        b"message:malformed frame received\n\n" % len(body) + body + b"\x00"
    )
    frame = parse_one(data)
    assert frame.header("message") == "malformed frame received"
    assert frame.header("receipt-id") == "message-12345"
    assert frame.body == body


def test_a_repeated_header_keeps_every_occurrence_and_the_first_counts() -> None:
    frame = parse_one(b"MESSAGE\nfoo:World\nfoo:Hello\n\n\x00")
    assert frame.headers == [("foo", "World"), ("foo", "Hello")]
    assert frame.header("foo") == "World"
    assert frame.header_map() == {"foo": "World"}
    assert frame.header("bar") is None
    assert frame.header("bar", "x") == "x"
    # A repeated content-length: the first one sizes the body.
    frame = parse_one(b"SEND\ncontent-length:3\ncontent-length:1\n\na\x00b\x00")
    assert frame.body == b"a\x00b"


def test_header_values_keep_spaces_and_raw_colons() -> None:
    frame = parse_one(b"SEND\n key : a:b \nempty:\n\n\x00")
    assert frame.headers == [(" key ", " a:b "), ("empty", "")]


# ------------------------------------------------------------------ escaping


def test_escapes_are_decoded_in_names_and_values() -> None:
    frame = parse_one(b"MESSAGE\na\\cb:1\\r2\\n3\\c4\\\\5\n\n\x00")
    assert frame.headers == [("a:b", "1\r2\n3:4\\5")]


def test_connect_stomp_and_connected_headers_are_not_escaped() -> None:
    for command in ("CONNECT", "STOMP", "CONNECTED"):
        frame = parse_one(b"%s\nlogin:a\\nb\\t\nhost:x:61613\n\n\x00" % command.encode())
        assert frame.headers == [("login", "a\\nb\\t"), ("host", "x:61613")], command
        encoded = encode(frame)
        assert b"login:a\\nb\\t\n" in encoded
        assert parse_one(encoded) == frame


def test_the_encoder_escapes_every_special_character() -> None:
    frame = Frame("SEND", [("a:b\\", "x\ny\rz:\\")])
    assert encode(frame) == b"SEND\na\\cb\\\\:x\\ny\\rz\\c\\\\\n\n\x00"
    assert parse_one(encode(frame)) == frame


@pytest.mark.parametrize("escape", [b"\\t", b"\\a", b"\\C", b"\\N", b"\\ ", b"\\\xc3\xa9"])
def test_an_undefined_escape_is_refused(escape: bytes) -> None:
    refused(b"SEND\nname:x" + escape + b"y\n\n\x00", "not defined by STOMP 1.2")
    refused(b"SEND\nna" + escape + b"me:x\n\n\x00", "not defined by STOMP 1.2")


def test_a_backslash_ending_a_header_is_refused() -> None:
    refused(b"SEND\nname:x\\\n\n\x00", "backslash at the end")
    refused(b"SEND\nname\\:x\n\n\x00", "backslash at the end")


def test_an_unescaped_frame_cannot_encode_a_line_break() -> None:
    for command in UNESCAPED_COMMANDS:
        with pytest.raises(FrameError, match="line break"):
            encode(Frame(command, [("login", "a\nb")]))
        with pytest.raises(FrameError, match="line break"):
            encode(Frame(command, [("log:in", "a")]))


# ------------------------------------------------------------------ bodies


def test_content_length_reads_a_body_holding_nul_octets() -> None:
    body = b"\x00\x01\x00\n\r\n\x00"
    frame = parse_one(b"SEND\ndestination:/queue/a\ncontent-length:7\n\n" + body + b"\x00")
    assert frame.body == body
    assert encode(frame) == b"SEND\ndestination:/queue/a\ncontent-length:7\n\n" + body + b"\x00"


def test_a_zero_content_length_and_leading_zeros() -> None:
    assert parse_one(b"SEND\ncontent-length:0\n\n\x00").body == b""
    assert parse_one(b"SEND\ncontent-length:0003\n\nabc\x00").body == b"abc"
    assert parse_one(b"SUBSCRIBE\nid:1\ncontent-length:0\n\n\x00").header("id") == "1"


def test_the_body_must_be_followed_by_nul_at_its_content_length() -> None:
    refused(b"SEND\ncontent-length:2\n\nabc\x00", "not followed by a NUL")


@pytest.mark.parametrize("value", ["abc", "-1", "+1", " 1", "1.0", "", "\u0661", "0x10"])
def test_a_content_length_that_is_not_a_number_is_refused(value: str) -> None:
    refused(b"SEND\ncontent-length:" + value.encode() + b"\n\n\x00", "content-length must be a number")


def test_a_huge_content_length_is_refused_as_too_large() -> None:
    refused(b"SEND\ncontent-length:" + b"9" * 5000 + b"\n\n", "larger than")


def test_only_send_message_and_error_may_have_a_body() -> None:
    for command in sorted(ALL_COMMANDS - BODY_COMMANDS):
        refused(b"%s\n\nx\x00" % command.encode(), "frames may not have a body")
        refused(b"%s\ncontent-length:1\n\nx\x00" % command.encode(), "frames may not have a body")
        with pytest.raises(FrameError, match="frames may not have a body"):
            encode(Frame(command, [], b"x"))
    for command in BODY_COMMANDS:
        assert parse_one(b"%s\n\nx\x00" % command.encode()).body == b"x"


def test_the_encoder_adds_content_length_to_bodies_only() -> None:
    assert encode(Frame("SEND", [("destination", "/q")], b"hi")) == b"SEND\ndestination:/q\ncontent-length:2\n\nhi\x00"
    assert encode(Frame("SEND", [("destination", "/q")])) == b"SEND\ndestination:/q\n\n\x00"
    # Without content-length, as ActiveMQ reads a text message.
    assert encode(Frame("SEND", [], b"hi"), add_content_length=False) == b"SEND\n\nhi\x00"
    with pytest.raises(FrameError, match="needs a content-length"):
        encode(Frame("SEND", [], b"h\x00i"), add_content_length=False)
    # A content-length the frame has already must match.
    assert encode(Frame("SEND", [("content-length", "2")], b"hi")) == b"SEND\ncontent-length:2\n\nhi\x00"
    with pytest.raises(FrameError, match="content-length is '3' but the body has 2 bytes"):
        encode(Frame("SEND", [("content-length", "3")], b"hi"))


def test_the_encoder_refuses_what_the_parser_would_not_read_back() -> None:
    with pytest.raises(FrameError, match="unknown command"):
        encode(Frame("PUBLISH"))
    with pytest.raises(FrameError, match="may not be empty"):
        encode(Frame("SEND", [("", "x")]))
    with pytest.raises(FrameError, match="NUL"):
        encode(Frame("SEND", [("a", "x\x00")]))
    with pytest.raises(FrameError, match="lone surrogate"):
        encode(Frame("SEND", [("a", "x\udc80")]))


def test_error_frame() -> None:
    frame = error_frame("malformed frame\nreceived", receipt_id="r-1", details="line 2: no colon")
    assert frame.command == "ERROR"
    assert frame.headers == [
        ("message", "malformed frame\nreceived"),
        ("receipt-id", "r-1"),
        ("content-type", "text/plain;charset=utf-8"),
    ]
    assert frame.body == b"line 2: no colon"
    assert parse(encode(frame), None) == [Frame("ERROR", [*frame.headers, ("content-length", "16")], frame.body)]
    assert error_frame("bad") == Frame("ERROR", [("message", "bad")])


# ------------------------------------------------------------------ line endings and heart-beats


def test_crlf_line_endings_everywhere() -> None:
    frame = parse_one(b"SEND\r\ndestination:/queue/a\r\nreceipt:7\r\n\r\nbody\r\n\x00\r\n")
    assert frame == Frame("SEND", [("destination", "/queue/a"), ("receipt", "7")], b"body\r\n")
    mixed = parse_one(b"SEND\ndestination:/queue/a\r\nreceipt:7\n\r\nbody\x00")
    assert mixed == Frame("SEND", [("destination", "/queue/a"), ("receipt", "7")], b"body")


def test_a_carriage_return_not_ending_a_line_is_refused() -> None:
    refused(b"SEND\ndestination:/qu\reue/a\n\n\x00", "carriage return")
    refused(b"SE\rND\n\n\x00", "carriage return")
    refused(b"SEND\r\r\n\n\x00", "carriage return")
    refused(b"\r\rSEND\n\n\x00", "carriage return")


def test_heart_beats_between_frames_are_counted() -> None:
    parser = FrameParser()
    assert parser.feed(b"\n\r\n\n") == []
    assert parser.heartbeats == 3
    frames = parser.feed(b"SEND\n\n\x00\r\n\nSEND\n\n\x00")
    assert [f.command for f in frames] == ["SEND", "SEND"]
    assert parser.heartbeats == 5
    # A CR and its LF in separate chunks.
    assert parser.feed(b"\r") == []
    assert parser.heartbeats == 5
    assert parser.feed(b"\n") == []
    assert parser.heartbeats == 6
    assert parser.buffered == 0


# ------------------------------------------------------------------ malformed frames


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"PUBLISH\n\n\x00", "unknown command 'PUBLISH'"),
        (b"send\n\n\x00", "unknown command 'send'"),
        (b" SEND\n\n\x00", "unknown command"),
        (b"SEND \n\n\x00", "unknown command"),
        (b"SEND\nno colon\n\n\x00", "no ':'"),
        (b"SEND\n:value\n\n\x00", "empty name"),
        (b"SEND\nname:caf\xe9\n\n\x00", "invalid UTF-8"),
        (b"SEND\nname:\xed\xa0\x80\n\n\x00", "invalid UTF-8"),  # an encoded surrogate
        (b"SEN\xc3\n\n\x00", "invalid UTF-8"),
        (b"SEND\nname:va\x00lue\n\n\x00", "NUL"),
        (b"DISCONNECT\n\x00", "NUL"),
        (b"\x00", "NUL"),
    ],
)
def test_malformed_frames_are_refused(data: bytes, match: str) -> None:
    refused(data, match)


def test_a_parser_accepts_only_the_commands_it_is_given() -> None:
    server = FrameParser(commands=CLIENT_COMMANDS)
    with pytest.raises(FrameError, match="MESSAGE frames are not expected here"):
        server.feed(b"MESSAGE\n\n\x00")
    client = FrameParser(commands=SERVER_COMMANDS)
    with pytest.raises(FrameError, match="SEND frames are not expected here"):
        client.feed(b"SEND\n\n\x00")
    assert FrameParser(commands=SERVER_COMMANDS).feed(b"RECEIPT\nreceipt-id:1\n\n\x00")[0].command == "RECEIPT"
    assert CLIENT_COMMANDS | SERVER_COMMANDS == ALL_COMMANDS == set(Command)
    assert not CLIENT_COMMANDS & SERVER_COMMANDS


def test_after_an_error_the_frames_before_it_are_kept_and_the_parser_refuses_more() -> None:
    parser = FrameParser()
    assert parser.feed(b"SEND\n\nstart") == []
    with pytest.raises(FrameError, match="unknown command 'BOGUS'") as caught:
        parser.feed(b"\x00\nSEND\n\nsecond\x00BOGUS\n\n\x00SEND\n\n\x00")
    assert caught.value.frames == (Frame("SEND", [], b"start"), Frame("SEND", [], b"second"))
    assert parser.failed
    assert parser.buffered == 0
    with pytest.raises(FrameError, match="refused earlier: unknown command 'BOGUS'"):
        parser.feed(b"SEND\n\n\x00")


def test_frame_error_is_a_jmsstore_error_and_pickles() -> None:
    error = FrameError("bad frame", [Frame("SEND", [("a", "b")], b"x")])
    assert isinstance(error, JmsStoreError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is FrameError
    assert str(copy) == "bad frame"
    assert copy.frames == error.frames


# ------------------------------------------------------------------ split anywhere

STREAM = (
    b"\r\nCONNECT\r\naccept-version:1.2\r\nhost:h\\x\r\n\r\n\x00\n"
    b"SEND\ndestination:/queue/a\\cb\nreceipt:1\ncontent-length:5\n\na\x00\r\nb\x00\r\n\r\n"
    b"SEND\ndestination:/queue/\xc3\xa9\n\ntext body\x00"
    b"\nDISCONNECT\nreceipt:2\n\n\x00"
)


def chunked(parser: FrameParser, data: bytes, cuts: list[int]) -> list[Frame]:
    frames: list[Frame] = []
    bounds = [0, *sorted(cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        frames += parser.feed(data[start:end])
    return frames


def test_every_split_point_gives_the_same_frames() -> None:
    whole = FrameParser()
    expected = whole.feed(STREAM)
    assert [f.command for f in expected] == ["CONNECT", "SEND", "SEND", "DISCONNECT"]
    assert expected[0].header("host") == "h\\x"
    assert expected[1].header("destination") == "/queue/a:b"
    assert expected[1].body == b"a\x00\r\nb"
    assert expected[2].header("destination") == "/queue/é"
    assert whole.heartbeats == 5
    for cut in range(len(STREAM) + 1):
        parser = FrameParser()
        assert chunked(parser, STREAM, [cut]) == expected, cut
        assert parser.heartbeats == whole.heartbeats
        assert parser.buffered == 0


def test_every_pair_of_split_points_gives_the_same_frames() -> None:
    data = b"SEND\r\nk\\c:v\\\\\\n\r\ncontent-length:2\r\n\r\n\x00\x00\x00\r\nACK\nid:1\n\n\x00"
    expected = parse(data)
    assert expected == [
        Frame("SEND", [("k:", "v\\\n"), ("content-length", "2")], b"\x00\x00"),
        Frame("ACK", [("id", "1")]),
    ]
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1):
            assert chunked(FrameParser(), data, [first, second]) == expected, (first, second)


def test_byte_by_byte() -> None:
    parser = FrameParser()
    frames = [frame for byte in STREAM for frame in parser.feed(bytes([byte]))]
    assert frames == parse(STREAM)


# ------------------------------------------------------------------ limits

SMALL = FrameLimits(max_frame_bytes=4096, max_headers=8, max_header_line_bytes=256, max_body_bytes=2048)


def test_limits_are_checked_on_complete_frames() -> None:
    line = b"h:" + b"v" * 254
    assert parse(b"SEND\n" + line + b"\n\n\x00", SMALL)[0].header("h") == "v" * 254
    assert parse(b"SEND\r\n" + line + b"\r\n\r\n\x00", SMALL)[0].header("h") == "v" * 254  # the CR is not counted
    refused(b"SEND\n" + line + b"v\n\n\x00", "header line is longer than 256 bytes", SMALL)
    refused(b"S" * 257 + b"\n\n\x00", "header line is longer than 256 bytes", SMALL)
    eight = b"".join(b"h%d:v\n" % i for i in range(8))
    assert len(parse(b"SEND\n" + eight + b"\n\x00", SMALL)[0].headers) == 8
    refused(b"SEND\n" + eight + b"h9:v\n\n\x00", "more than 8 headers", SMALL)
    assert parse(b"SEND\n\n" + b"b" * 2048 + b"\x00", SMALL)[0].body == b"b" * 2048
    refused(b"SEND\n\n" + b"b" * 2049 + b"\x00", "body is larger than 2048 bytes", SMALL)
    refused(b"SEND\ncontent-length:2049\n\n" + b"b" * 2049 + b"\x00", "body is larger than 2048 bytes", SMALL)


def test_the_frame_limit_counts_headers_and_body() -> None:
    limits = FrameLimits(max_frame_bytes=100, max_headers=10, max_header_line_bytes=50, max_body_bytes=100)
    head = b"SEND\n" + b"".join(b"h%d:%s\n" % (i, b"v" * 20) for i in range(3)) + b"\n"
    body_room = 100 - len(head) - 1
    assert parse(head + b"b" * body_room + b"\x00", limits)[0].body == b"b" * body_room
    refused(head + b"b" * (body_room + 1) + b"\x00", "frame is larger than 100 bytes", limits)
    with_length = head.replace(b"\n\n", b"\ncontent-length:%d\n\n" % body_room)
    refused(with_length + b"b" * body_room + b"\x00", "frame is larger than 100 bytes", limits)


def test_a_content_length_over_the_limit_is_refused_before_the_body_arrives() -> None:
    parser = FrameParser(SMALL)
    with pytest.raises(FrameError, match="body is larger than 2048 bytes"):
        parser.feed(b"SEND\ndestination:/q\ncontent-length:1000000000\n\n")
    assert parser.buffered == 0


def stream_until_refused(parser: FrameParser, start: bytes, filler: bytes, chunk_size: int) -> tuple[FrameError, int]:
    """Feeds ``start``, then ``filler`` in chunks of about ``chunk_size`` bytes,
    checking that the parser never holds more than its limit between chunks; the
    error that refused the stream and how many bytes had been sent by then."""
    sent = 0
    data = start
    while sent < 1024 * 1024:
        sent += len(data)
        try:
            parser.feed(data)
        except FrameError as error:
            assert parser.buffered == 0
            return error, sent
        assert parser.buffered <= parser.limits.max_frame_bytes
        data = filler * max(1, chunk_size // len(filler))
    raise AssertionError("1 MiB was accepted without a complete frame")


@pytest.mark.parametrize(
    ("start", "filler", "match"),
    [
        (b"SEND\ndestination:/q\n\n", b"x", "body is larger than 2048 bytes"),
        (b"SEND\ndestination:/q\ncontent-length:2000\n\n", b"x", "not followed by a NUL"),
        (b"SEND\ndestination:", b"x", "header line is longer than 256 bytes"),
        (b"", b"S", "header line is longer than 256 bytes"),
        (b"SEND\n", b"a:b\n", "more than 8 headers"),
        (b"", b"\r", "header line is longer than 256 bytes"),
    ],
)
@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_a_frame_that_never_ends_is_refused_once_over_the_limit(
    start: bytes, filler: bytes, match: str, chunk_size: int
) -> None:
    error, sent = stream_until_refused(FrameParser(SMALL), start, filler, chunk_size)
    assert match in str(error)
    assert error.frames == ()
    # Refused within the limit plus one chunk.
    assert sent <= len(start) + SMALL.max_frame_bytes + chunk_size


@pytest.mark.parametrize("chunk_size", [1, 7, 64, 1000])
def test_headers_that_never_end_are_refused_at_the_frame_limit(chunk_size: int) -> None:
    """Within the line and header-count limits, but over the frame's."""
    limits = FrameLimits(max_frame_bytes=300, max_headers=1000, max_header_line_bytes=100, max_body_bytes=100)
    line = b"h:" + b"v" * 60 + b"\n"
    error, sent = stream_until_refused(FrameParser(limits), b"SEND\n", line, chunk_size)
    assert "frame is larger than 300 bytes" in str(error)
    assert sent <= len(b"SEND\n") + 300 + max(chunk_size, len(line))


def test_endless_heart_beats_are_not_buffered() -> None:
    parser = FrameParser(SMALL)
    for _ in range(1000):
        parser.feed(b"\r\n\n" * 100)
        assert parser.buffered == 0
    assert parser.heartbeats == 200_000


def test_limits_must_be_positive_ints() -> None:
    with pytest.raises(InvalidArgumentError, match=r"max_headers must be within 1\.\.\d+, not 0"):
        FrameLimits(max_headers=0)
    with pytest.raises(TypeError, match="max_body_bytes is an int, not float"):
        FrameLimits(max_body_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        FrameLimits(max_frame_bytes=True)
    assert FrameLimits().max_headers == 1000


# ------------------------------------------------------------------ properties

NO_NUL = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
ESCAPED_TEXT = st.text(NO_NUL, max_size=20)
UNESCAPED_VALUE = st.text(st.characters(exclude_characters="\x00\r\n", exclude_categories=["Cs"]), max_size=20)
UNESCAPED_NAME = st.text(
    st.characters(exclude_characters="\x00\r\n:", exclude_categories=["Cs"]), min_size=1, max_size=20
)


@st.composite
def frames(draw: st.DrawFn) -> Frame:
    command = draw(st.sampled_from(sorted(ALL_COMMANDS)))
    if command in UNESCAPED_COMMANDS:
        names, values = UNESCAPED_NAME, UNESCAPED_VALUE
    else:
        names, values = st.text(NO_NUL, min_size=1, max_size=20), ESCAPED_TEXT
    headers = draw(st.lists(st.tuples(names.filter(lambda n: n != "content-length"), values), max_size=6))
    body = draw(st.binary(max_size=300)) if command in BODY_COMMANDS else b""
    return Frame(command, headers, body)


def as_parsed(frame: Frame) -> Frame:
    """The frame as it reads back after encoding: with the content-length added."""
    extra = [("content-length", str(len(frame.body)))] if frame.body else []
    return Frame(frame.command, [*frame.headers, *extra], frame.body)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(frames(), min_size=1, max_size=4),
    st.lists(st.sampled_from([b"", b"\n", b"\r\n", b"\n\n"]), min_size=4, max_size=4),
    st.data(),
)
def test_encoded_frames_parse_back_however_they_are_split(
    sent: list[Frame], gaps: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(encode(frame) + gap for frame, gap in zip(sent, gaps, strict=False))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    parser = FrameParser()
    assert chunked(parser, stream, cuts) == [as_parsed(frame) for frame in sent]
    assert parser.heartbeats == sum(gap.count(b"\n") for gap in gaps[: len(sent)])
    assert parser.buffered == 0


FUZZ_LIMITS = FrameLimits(max_frame_bytes=400, max_headers=6, max_header_line_bytes=64, max_body_bytes=200)
TOKENS = [
    b"SEND",
    b"CONNECT",
    b"MESSAGE",
    b"ACK",
    b"\n",
    b"\r\n",
    b"\r",
    b"\x00",
    b":",
    b"a",
    b"\\",
    b"\\n",
    b"\\c",
    b"\\t",
    b"content-length:",
    b"3",
    b"9999",
    b"destination:/queue/a",
    b"\xc3\xa9",
    b"\xff",
    b"\xc3",
]


@st.composite
def damaged_frames(draw: st.DrawFn) -> bytes:
    """Encoded frames with a few bytes deleted or tokens inserted."""
    data = bytearray(b"".join(encode(frame) for frame in draw(st.lists(frames(), min_size=1, max_size=3))))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(data)))
        if draw(st.booleans()) and position < len(data):
            del data[position]
        else:
            data[position:position] = draw(st.sampled_from(TOKENS))
    return bytes(data)


FUZZ_INPUT = st.one_of(
    damaged_frames(),
    st.binary(max_size=300),
    st.lists(st.one_of(st.sampled_from(TOKENS), st.binary(max_size=8)), max_size=80).map(b"".join),
    st.lists(frames(), max_size=3).map(lambda fs: b"".join(map(encode, fs))),
)


def outcome(data: bytes, cuts: list[int]) -> tuple[list[Frame], bool, int]:
    """Frames read (including those before an error), whether it failed, heart-beats."""
    parser = FrameParser(FUZZ_LIMITS)
    frames: list[Frame] = []
    bounds = [0, *sorted(cuts), len(data)]
    for start, end in itertools.pairwise(bounds):
        try:
            frames += parser.feed(data[start:end])
        except FrameError as error:
            assert parser.buffered == 0
            return frames + list(error.frames), True, parser.heartbeats
        assert parser.buffered <= FUZZ_LIMITS.max_frame_bytes
    return frames, False, parser.heartbeats


@settings(max_examples=1500, deadline=None)
@given(FUZZ_INPUT, st.data())
def test_any_bytes_in_any_chunks_give_frames_or_frame_error_and_stay_bounded(data: bytes, draw: st.DataObject) -> None:
    cuts = draw.draw(st.lists(st.integers(0, len(data)), max_size=12))
    whole = outcome(data, [])
    assert outcome(data, cuts) == whole
    for frame in whole[0]:
        assert frame.command in ALL_COMMANDS
        assert len(frame.body) <= FUZZ_LIMITS.max_body_bytes
        assert len(frame.headers) <= FUZZ_LIMITS.max_headers


@settings(max_examples=500, deadline=None)
@given(FUZZ_INPUT)
def test_frames_read_whole_natively_are_those_read_byte_by_byte(data: bytes) -> None:
    # Fed whole, the frames there whole are read natively; fed one byte at a
    # time, every frame is read line by line in Python.
    assert outcome(data, []) == outcome(data, list(range(1, len(data))))


# ------------------------------------------------------------------ agreement with stomp.py

STOMPPY_NAME = st.text(
    st.characters(exclude_characters="\x00\r\n:\\", exclude_categories=["Cs"]), min_size=1, max_size=12
)


def stomppy_encode(command: str, headers: dict[str, str], body: bytes) -> bytes:
    """A frame as stomp.py 1.2 sends it: values escaped by its protocol
    (except for CONNECT and STOMP), a content-length for a body."""
    headers = dict(headers)
    if body:
        headers["content-length"] = str(len(body))
    if command not in (stomp.utils.CMD_CONNECT, stomp.utils.CMD_STOMP):
        stomp.protocol.Protocol12._escape_headers(None, headers)
    return b"".join(stomp.utils.convert_frame(stomp.utils.Frame(command, headers, body)))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["SEND", "SUBSCRIBE", "ACK", "CONNECT", "STOMP", "MESSAGE"]),
    st.dictionaries(STOMPPY_NAME.filter(lambda n: n != "content-length"), ESCAPED_TEXT, max_size=6),
    st.binary(max_size=200),
)
def test_frames_stomppy_encodes_parse_here(command: str, headers: dict[str, str], body: bytes) -> None:
    if command not in BODY_COMMANDS:
        body = b""
    if command in UNESCAPED_COMMANDS:
        headers = {name: value.replace("\r", "").replace("\n", "") for name, value in headers.items()}
    frame = parse_one(stomppy_encode(command, headers, body))
    assert frame.command == command
    expected = dict(headers)
    if body:
        expected["content-length"] = str(len(body))
    assert frame.header_map() == expected
    assert frame.body == body


@settings(max_examples=200, deadline=None)
@given(frames().filter(lambda f: f.command not in UNESCAPED_COMMANDS))
def test_frames_encoded_here_parse_in_stomppy(frame: Frame) -> None:
    data = encode(frame)
    assert data.endswith(b"\x00")
    # stomp.py's transport cuts the stream at the NUL and hands the frame without it to parse_frame.
    parsed = stomp.utils.parse_frame(data[:-1])
    assert parsed.cmd == frame.command
    assert parsed.headers == as_parsed(frame).header_map()
    assert parsed.body == frame.body


def test_the_stream_of_a_stomppy_session_parses() -> None:
    """The frames stomp.py writes for a session: connect, subscribe, send, ack, disconnect."""
    stream = b"".join(
        [
            stomppy_encode("STOMP", {"accept-version": "1.2", "host": "localhost", "heart-beat": "0,0"}, b""),
            stomppy_encode("SUBSCRIBE", {"destination": "/queue/a:b", "id": "1", "ack": "client-individual"}, b""),
            stomppy_encode("SEND", {"destination": "/queue/a:b", "note": "line\nbreak\\"}, "héllo".encode()),
            stomppy_encode("ACK", {"id": "m-1"}, b""),
            stomppy_encode("DISCONNECT", {"receipt": "bye"}, b""),
        ]
    )
    frames = FrameParser(commands=CLIENT_COMMANDS).feed(stream)
    assert [f.command for f in frames] == ["STOMP", "SUBSCRIBE", "SEND", "ACK", "DISCONNECT"]
    assert frames[1].header("destination") == "/queue/a:b"
    assert frames[2].header("note") == "line\nbreak\\"
    assert frames[2].body.decode() == "héllo"
