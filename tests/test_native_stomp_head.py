"""The bindings of the core's STOMP head scan (``scan_head``), whole-frame
scan (``WholeFrameScanner``) and plain frame writer (``encode_plain``), the
frame parser's and encoder's native common cases: what they convert, what
they leave to the Python code, and that both ways read and write a frame
alike."""

from __future__ import annotations

import pytest
from jmsstore._native import WholeFrameScanner, encode_plain, scan_head
from jmsstore.net.stomp.frames import CLIENT_COMMANDS, Command, Frame, FrameError, FrameLimits, FrameParser, encode

LIMITS = (1 << 20, 1024, 100)


def test_a_plain_head_comes_back_as_python_values() -> None:
    buffer = bytearray(b"\n\nSEND\ndestination:/queue/a\nreceipt:r1\ncontent-length:2\n\nhi\0")
    heartbeats, start, command, headers, body_start = scan_head(buffer, 0, *LIMITS) or pytest.fail("not read")
    assert (heartbeats, start, command) == (2, 2, "SEND")
    assert headers == [("destination", "/queue/a"), ("receipt", "r1"), ("content-length", "2")]
    assert bytes(buffer[body_start:]) == b"hi\0"
    assert buffer == bytearray(b"\n\nSEND\ndestination:/queue/a\nreceipt:r1\ncontent-length:2\n\nhi\0")  # untouched


@pytest.mark.parametrize(
    "raw",
    [b"SEND\ndestination:/q", b"SEND\r\ndestination:/q\r\n\r\n", b"SEND\nd:a\\cb\n\n", b"SEND\nd:\xff\n\n"],
)
def test_anything_but_the_plain_case_is_none(raw: bytes) -> None:
    assert scan_head(bytearray(raw), 0, *LIMITS) is None


def test_the_buffer_must_be_a_bytearray() -> None:
    with pytest.raises(TypeError):
        scan_head(b"SEND\n\n\0", 0, *LIMITS)  # type: ignore[arg-type]


def scanner(max_body_bytes: int = 1 << 20) -> WholeFrameScanner:
    return WholeFrameScanner(["ACK", "SEND"], ["SEND"], *LIMITS, max_body_bytes)


def test_whole_frames_come_back_as_python_values_up_to_the_first_incomplete_one() -> None:
    buffer = bytearray(b"xx\nSEND\ndestination:/queue/a\ncontent-length:3\n\na\0b\0\n\nACK\nid:7\n\n\0SEND\nd:/q\n\npa")
    heartbeats, end, frames, sent, acked = scanner().scan(buffer, 2)
    assert (sent, acked) == (0, 0)  # no lanes
    assert heartbeats == 3
    assert frames == [(1, [("destination", "/queue/a"), ("content-length", "3")], b"a\0b"), (0, [("id", "7")], b"")]
    assert all(type(body) is bytes for _, _, body in frames)
    assert bytes(buffer[end:]) == b"SEND\nd:/q\n\npa"
    assert buffer.startswith(b"xx\nSEND")  # untouched


@pytest.mark.parametrize(
    "raw",
    [
        b"NACK\nid:1\n\n\0",  # a command it was not given
        b"ACK\nid:1\n\nbody\0",  # a body where none may be
        b"SEND\ncontent-length:9\n\nbody\0",  # a body shorter than its length
        b"SEND\nd:a\\cb\n\n\0",  # an escape
        b"SEND\n\n" + b"x" * 11 + b"\0",  # a body over the limit
    ],
)
def test_a_frame_the_parser_must_read_itself_is_left_with_what_follows(raw: bytes) -> None:
    buffer = bytearray(b"ACK\nid:1\n\n\0" + raw + b"ACK\nid:2\n\n\0")
    heartbeats, end, frames, _, _ = scanner(max_body_bytes=10).scan(buffer, 0)
    assert (heartbeats, end, len(frames)) == (0, len(b"ACK\nid:1\n\n\0"), 1)


def test_the_native_and_the_python_reading_give_the_same_frames() -> None:
    plain = b"\nSEND\ndestination:/queue/a\nreceipt:r1\n\nbody\0ACK\nid:7\n\n\0"
    crlf = plain.replace(b"\n", b"\r\n").replace(b"body\0\r\n", b"body\0")  # CR LF lines: the Python reading
    assert scan_head(bytearray(crlf), 0, *LIMITS) is None
    frames = [FrameParser(commands=CLIENT_COMMANDS).feed(data) for data in (plain, crlf)]
    assert frames[0] == frames[1]
    assert [(f.command, f.headers, f.body) for f in frames[0]] == [
        ("SEND", [("destination", "/queue/a"), ("receipt", "r1")], b"body"),
        ("ACK", [("id", "7")], b""),
    ]


def test_an_unknown_command_in_a_plain_head_is_the_parser_s_error() -> None:
    parser = FrameParser(FrameLimits(), commands=CLIENT_COMMANDS)
    with pytest.raises(FrameError, match="unknown command 'SENT'"):
        parser.feed(b"SENT\ndestination:/queue/a\n\n\0")


def test_a_plain_frame_is_encoded_natively_as_the_python_encoder_would() -> None:
    headers = [("destination", "/queue/a"), ("k:\\", "line\nbreak\r")]
    data = encode_plain("MESSAGE", headers, b"x\0y")
    assert data == b"MESSAGE\ndestination:/queue/a\nk\\c\\\\:line\\nbreak\\r\ncontent-length:3\n\nx\0y\0"
    # The Python encoder's own way (a bytearray body is declined natively) writes the same bytes.
    assert encode_plain("MESSAGE", headers, bytearray(b"x\0y")) is None  # type: ignore[arg-type]
    assert encode(Frame(Command.MESSAGE, headers, bytearray(b"x\0y"))) == data  # type: ignore[arg-type]
    assert FrameParser().feed(data) == [Frame(Command.MESSAGE, [*headers, ("content-length", "3")], b"x\0y")]
    # A content-length of the body's length is kept where it is, not repeated.
    declared = [("content-length", "3"), *headers]
    assert encode_plain("MESSAGE", declared, b"x\0y") == encode(Frame(Command.MESSAGE, declared, bytearray(b"x\0y")))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers",
    [
        [("content-length", "2")],
        [("content-length", "01")],
        [("", "v")],
        [("k", "a\0b")],
        [("k", "\udc80")],
        [("k", 7)],
    ],
)
def test_what_the_encoder_must_check_is_declined(headers: list[tuple[str, object]]) -> None:
    assert encode_plain("SEND", headers, b"x") is None  # type: ignore[arg-type]
