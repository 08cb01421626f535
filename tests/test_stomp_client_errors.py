"""Frames whose headers the server cannot accept (numbers that are not
numbers, digits that are not ASCII, charsets that decode nothing, typed
units of order): each gets an ERROR frame naming the problem and carrying
the frame's ``receipt-id``, the connection closes, the server logs no
traceback and keeps serving the others."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from jmsstore.net import StompServer
from jmsstore.net.stomp import connection as stomp_connection
from jmsstore.net.stomp.mapping import ProtocolError, outgoing_message
from stomp_helpers import WAIT, RawClient


@pytest.fixture
def raw(served: StompServer) -> Iterator[Callable[[], RawClient]]:
    opened: list[RawClient] = []

    def open_() -> RawClient:
        opened.append(RawClient(served.address, timeout=WAIT))
        return opened[-1]

    yield open_
    for r in opened:
        r.close()


def _refused(r: RawClient, caplog: pytest.LogCaptureFixture, receipt: str, *named: str) -> str:
    """The ERROR frame the server answers with: it carries ``receipt`` and
    names each of ``named``; the connection closes and nothing was logged
    as a failure of the server."""
    frame = r.next_frame()
    assert frame.command == "ERROR", frame
    message = frame.header("message") or ""
    assert frame.header("receipt-id") == receipt, frame.headers
    assert "internal error" not in message
    for text in named:
        assert text in message, message
    assert r.closed_by_server()
    failures = [rec for rec in caplog.records if rec.levelno >= logging.WARNING or rec.exc_info]
    assert not failures, [rec.getMessage() for rec in failures]
    return message


def _still_serves(raw: Callable[[], RawClient]) -> None:
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/alive\nreceipt:ok\n\nstill here\x00")
    reply = r.next_frame()
    assert (reply.command, reply.header("receipt-id")) == ("RECEIPT", "ok")


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("priority", "--5"),
        ("expires", "--5"),
        ("priority", "-"),
        ("expires", "5-"),
        ("priority", "\u00b2"),  # superscript two: a digit to str.isdigit, not to int()
        ("expires", "1\u00b2"),
        ("priority", "\u0665"),  # Arabic-Indic five: int() reads it, STOMP numbers are ASCII
    ],
)
def test_a_send_whose_number_header_is_not_a_whole_number_is_refused_naming_the_header(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, header: str, value: str
) -> None:
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(f"SEND\ndestination:/queue/a\n{header}:{value}\nreceipt:s1\n\nhi\x00".encode())
    _refused(r, caplog, "s1", header, "whole number")
    _still_serves(raw)


@pytest.mark.parametrize("command", ["ACK", "NACK"])
@pytest.mark.parametrize("ack_id", ["\u00b2", "\u00b2.1", "1.\u00b2", "\u0661.1", "-1.1", ""])
def test_an_ack_or_nack_whose_id_is_not_one_the_server_gave_is_refused(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, command: str, ack_id: str
) -> None:
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SUBSCRIBE\nid:s\ndestination:/queue/a\nack:client\n\n\x00")
    r.send(f"{command}\nid:{ack_id}\nreceipt:a1\n\n\x00".encode())
    _refused(r, caplog, "a1", "no message awaits acknowledgement")
    _still_serves(raw)


@pytest.mark.parametrize("heart_beat", ["\u00b2,0", "0,\u00b2", "\u0661,0", "-1,0", "+1,0", "1,2,3", ""])
def test_a_connect_whose_heart_beat_is_not_two_whole_numbers_is_refused(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, heart_beat: str
) -> None:
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    r.send(f"CONNECT\naccept-version:1.2\nheart-beat:{heart_beat}\nreceipt:c1\n\n\x00".encode())
    _refused(r, caplog, "c1", "heart-beat")
    _still_serves(raw)


def test_a_heart_beat_with_blanks_around_its_numbers_is_still_accepted(raw: Callable[[], RawClient]) -> None:
    r = raw()
    assert r.connect(heart_beat=" 0 , 0 ").command == "CONNECTED"


@pytest.mark.parametrize("charset", ["undefined", "UNDEFINED", "idna", "punycode"])
def test_a_send_in_a_charset_that_decodes_nothing_or_not_this_body_is_refused_naming_it(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, charset: str
) -> None:
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    assert r.connect().command == "CONNECTED"
    # Not text in idna or punycode either: their decoders raise a bare UnicodeError.
    body = b"xn--\\x"
    r.send(
        b"SEND\ndestination:/queue/a\ncontent-type:text/plain;charset="
        + charset.encode()
        + b"\nreceipt:t1\n\n"
        + body
        + b"\x00"
    )
    _refused(r, caplog, "t1", "charset" if charset.lower() == "undefined" else charset)
    _still_serves(raw)


def test_the_undefined_codec_is_a_charset_the_server_does_not_know() -> None:
    with pytest.raises(ProtocolError, match="charset 'undefined' is not one the server knows"):
        outgoing_message({"destination": "/queue/q", "content-type": "text/plain;charset=undefined"}, b"a", 0)


@pytest.mark.parametrize("name", ["JMS_BEA_UnitOfOrder", "JMSXGroupID"])
@pytest.mark.parametrize(("kind", "value"), [("long", "5"), ("double", "1.5"), ("boolean", "true")])
def test_a_unit_of_order_or_group_typed_other_than_string_is_refused_naming_it(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, name: str, kind: str, value: str
) -> None:
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(
        f"SEND\ndestination:/queue/a\njmsstore.property-types:{name}:{kind}\n{name}:{value}\nreceipt:u1\n\nx\x00".encode()
    )
    _refused(r, caplog, "u1", name)
    _still_serves(raw)


def test_a_unit_of_order_as_a_string_is_still_sent(raw: Callable[[], RawClient]) -> None:
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/a\nJMS_BEA_UnitOfOrder:5\nJMSXGroupID:g\nreceipt:u2\n\nx\x00")
    reply = r.next_frame()
    assert (reply.command, reply.header("receipt-id")) == ("RECEIPT", "u2")


@pytest.mark.parametrize("error", [ValueError("a value it cannot take"), TypeError("a type it cannot take")])
def test_any_value_or_type_error_from_a_frame_is_an_error_frame_with_its_receipt_id(
    raw: Callable[[], RawClient],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    """Input the mapping does not foresee, raising deep in the server, still
    gets the client an ERROR frame saying what was wrong, with its receipt."""

    def failing(*_args: object) -> object:
        raise error

    monkeypatch.setattr(stomp_connection, "outgoing_message", failing)
    caplog.set_level(logging.INFO, logger="jmsstore.net.stomp")
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/a\nreceipt:v1\n\nhi\x00")
    _refused(r, caplog, "v1", str(error))


def test_an_internal_failure_handling_a_frame_still_answers_with_its_receipt_id(
    raw: Callable[[], RawClient], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*_args: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(stomp_connection, "outgoing_message", failing)
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/a\nreceipt:i1\n\nhi\x00")
    frame = r.next_frame()
    assert (frame.command, frame.header("message"), frame.header("receipt-id")) == ("ERROR", "internal error", "i1")
    assert r.closed_by_server()
    # A bug is logged with its traceback, for whoever runs the server.
    assert any(rec.exc_info for rec in caplog.records if rec.name == "jmsstore.net.stomp")
