"""STOMP 1.2 frames: the :class:`Frame` value, an incremental
:class:`FrameParser` for bytes as they arrive from a socket, and
:func:`encode` for the way back.

The parser follows the STOMP 1.2 grammar
(https://stomp.github.io/stomp-specification-1.2.html): a command line,
``name:value`` header lines, a blank line, the body and a NUL octet; lines
end with ``\\n`` or ``\\r\\n``; header names and values are UTF-8 with the
escapes ``\\r``, ``\\n``, ``\\c`` and ``\\\\`` (any other escape is an
error), except in CONNECT, STOMP and CONNECTED frames, which are never
escaped (as STOMP 1.0 clients expect); a ``content-length`` header fixes the
body's size, so the body may hold NUL octets; without it the body ends at
the first NUL. End-of-lines between frames are heart-beats.

Where the specification leaves room, the parser takes the common reading,
as ActiveMQ and RabbitMQ do: a header value may hold a raw ``:`` (the name
ends at the first one), and of a repeated header the first occurrence
counts. It is stricter than some brokers where leniency would let bad input
through: a NUL or a lone carriage return in the command or headers, a body
on a frame that may not carry one, or an undefined escape is refused.

Everything a peer sends is checked against :class:`FrameLimits` as it
arrives, so a peer that streams an endless header or body is refused once
over the limit: the parser never holds more than ``max_frame_bytes`` between
two calls to :meth:`FrameParser.feed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from jmsstore import _args
from jmsstore._native import NativeAckLane, NativeOutbox, NativeSendLane, WholeFrameScanner, encode_plain, scan_head
from jmsstore.errors import JmsStoreError

__all__ = [
    "ALL_COMMANDS",
    "BODY_COMMANDS",
    "CLIENT_COMMANDS",
    "SERVER_COMMANDS",
    "UNESCAPED_COMMANDS",
    "Command",
    "Frame",
    "FrameError",
    "FrameLimits",
    "FrameParser",
    "NativeRead",
    "encode",
    "error_frame",
]


class FrameError(JmsStoreError):
    """A frame is malformed, over a limit, or cannot be encoded.

    The message is written to be sent back to the peer as an ERROR frame's
    ``message`` header. When the parser fails, ``frames`` holds the complete
    frames that arrived before the bad bytes in the same :meth:`FrameParser.feed`
    call, in order, so that they can be handled before the ERROR is sent.
    """

    def __init__(self, message: str, frames: Iterable[Frame] = ()) -> None:
        super().__init__(message)
        self.frames: tuple[Frame, ...] = tuple(frames)

    def __reduce__(self) -> tuple[type, tuple[str, tuple[Frame, ...]]]:
        return (FrameError, (str(self), self.frames))


class Command(StrEnum):
    """The commands of STOMP 1.2. Members are strings: ``Command.SEND == "SEND"``."""

    # Sent by clients.
    CONNECT = "CONNECT"
    STOMP = "STOMP"
    SEND = "SEND"
    SUBSCRIBE = "SUBSCRIBE"
    UNSUBSCRIBE = "UNSUBSCRIBE"
    ACK = "ACK"
    NACK = "NACK"
    BEGIN = "BEGIN"
    COMMIT = "COMMIT"
    ABORT = "ABORT"
    DISCONNECT = "DISCONNECT"
    # Sent by servers.
    CONNECTED = "CONNECTED"
    MESSAGE = "MESSAGE"
    RECEIPT = "RECEIPT"
    ERROR = "ERROR"


CLIENT_COMMANDS: frozenset[str] = frozenset(
    {
        Command.CONNECT,
        Command.STOMP,
        Command.SEND,
        Command.SUBSCRIBE,
        Command.UNSUBSCRIBE,
        Command.ACK,
        Command.NACK,
        Command.BEGIN,
        Command.COMMIT,
        Command.ABORT,
        Command.DISCONNECT,
    }
)
"""The commands a client sends: what a server's parser accepts."""

SERVER_COMMANDS: frozenset[str] = frozenset({Command.CONNECTED, Command.MESSAGE, Command.RECEIPT, Command.ERROR})
"""The commands a server sends: what a client's parser accepts."""

ALL_COMMANDS: frozenset[str] = CLIENT_COMMANDS | SERVER_COMMANDS

BODY_COMMANDS: frozenset[str] = frozenset({Command.SEND, Command.MESSAGE, Command.ERROR})
"""The only frames that may carry a body."""

UNESCAPED_COMMANDS: frozenset[str] = frozenset({Command.CONNECT, Command.STOMP, Command.CONNECTED})
"""Frames whose headers are not escaped. STOMP 1.2 names CONNECT and
CONNECTED; STOMP is CONNECT's other name, and clients (stomp.py among them)
leave it unescaped too."""

_COMMANDS_BY_NAME = {command.value: command for command in Command}

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """How much one frame may hold; the defaults are ActiveMQ's (1000
    headers, 10 KiB header lines, 100 MiB bodies).

    ``max_frame_bytes`` counts from the command line to the NUL octet
    included; ``max_header_line_bytes`` counts one line (the command line
    too) without its end-of-line; ``max_body_bytes`` counts the body alone.
    """

    max_frame_bytes: int = 101 * _MiB
    max_headers: int = 1000
    max_header_line_bytes: int = 10 * 1024
    max_body_bytes: int = 100 * _MiB

    def __post_init__(self) -> None:
        for name in ("max_frame_bytes", "max_headers", "max_header_line_bytes", "max_body_bytes"):
            _args.integer(name, getattr(self, name), 1, _args.U64_MAX)


@dataclass(slots=True)
class Frame:
    """One STOMP frame: a command, its headers in the order they came (a
    header may repeat; the first occurrence counts) and a body of bytes."""

    command: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str, default: str | None = None) -> str | None:
        """The value of the first header called ``name``, or ``default``."""
        for header_name, value in self.headers:
            if header_name == name:
                return value
        return default

    def header_map(self) -> dict[str, str]:
        """The headers as a dict, each name with its first value."""
        found: dict[str, str] = {}
        for name, value in self.headers:
            found.setdefault(name, value)
        return found


# ------------------------------------------------------------------ header escaping

_ESCAPE_SEQUENCE = re.compile(r"\\(.?)", re.DOTALL)
_UNESCAPED = {"r": "\r", "n": "\n", "c": ":", "\\": "\\"}


def _unescape_one(match: re.Match[str]) -> str:
    try:
        return _UNESCAPED[match.group(1)]
    except KeyError:
        sequence = match.group(0)
        what = "a backslash at the end of a header" if sequence == "\\" else f"the escape {sequence!r}"
        raise FrameError(f"{what} is not defined by STOMP 1.2 (only \\r, \\n, \\c and \\\\ are)") from None


def _unescape(text: str) -> str:
    return _ESCAPE_SEQUENCE.sub(_unescape_one, text) if "\\" in text else text


def _escape(text: str) -> str:
    # The backslash goes first, so the escapes added after it are not escaped again.
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c")


# ------------------------------------------------------------------ parser


_LONE_CR = "a carriage return that does not end the line in the {}"


def _head_text(raw: bytes, what: str) -> str:
    """Command or header bytes as text: UTF-8 with no NUL."""
    if b"\x00" in raw:
        raise FrameError(f"a NUL octet in the {what} (a frame's headers end with a blank line)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FrameError(f"invalid UTF-8 in the {what} (at byte {error.start})") from None


def _header_line_error(line: str) -> FrameError:
    if ":" not in line:
        return FrameError(f"a header line has no ':' separating the name from the value: {line[:40]!r}")
    return FrameError("a header line has an empty name")


def _copy(buffer: bytearray, start: int, end: int) -> bytes:
    """``buffer[start:end]`` as bytes in one copy; the views are released so that
    the buffer can grow and shrink again."""
    with memoryview(buffer) as view, view[start:end] as part:
        return part.tobytes()


@dataclass(frozen=True, slots=True)
class NativeRead:
    """What :meth:`FrameParser.read_natively` did."""

    stop: str
    """Why it gave the socket back: ``"time"`` (its wait, or its busy
    spell, is over), ``"woken"`` (the outbox's wake-up pipe is readable),
    ``"rest"`` (a frame the lanes did not take), ``"failed"`` (a lane's
    failure is kept), ``"receipts"`` (the receipt limit is reached),
    ``"closed"`` (the peer closed the stream) or ``"full"`` (a read filled
    its buffer: the peer streams)."""
    frames: list[Frame]
    """The frames read after those the lanes took, for the caller to handle."""
    reads: int
    """Reads of the socket that returned bytes (0: the peer was not heard)."""


class FrameParser:
    """Turns a byte stream into STOMP 1.2 frames.

    Call :meth:`feed` with each chunk as it arrives (a chunk may end
    anywhere, even inside an escape or between a CR and its LF); it returns
    the frames completed by that chunk. End-of-lines between frames are
    heart-beats: :attr:`heartbeats` counts them, so a server can tell a
    live peer from a silent one (the optional end-of-lines after a frame's
    NUL are counted too: nothing tells them apart).

    ``commands`` are the commands accepted: a server passes
    :data:`CLIENT_COMMANDS`, a client :data:`SERVER_COMMANDS`. Any other
    command, malformed input or input over ``limits`` raises
    :class:`FrameError`; the parser then drops what it holds and refuses
    further input (a STOMP peer answers with an ERROR frame and closes).
    """

    def __init__(self, limits: FrameLimits | None = None, commands: Iterable[str] = ALL_COMMANDS) -> None:
        self.limits = limits if limits is not None else FrameLimits()
        self.commands = frozenset(commands)
        # Plain frames that are there whole are read natively, many per call;
        # the scanner names their commands by their index in this tuple.
        self._commands_in_order = tuple(sorted(self.commands))
        limits = self.limits
        self._whole_frames = WholeFrameScanner(
            [str(command) for command in self._commands_in_order],
            sorted(str(command) for command in BODY_COMMANDS),
            limits.max_frame_bytes,
            limits.max_header_line_bytes,
            limits.max_headers,
            limits.max_body_bytes,
        )
        self.heartbeats = 0
        """End-of-lines received between frames."""
        self.lane_sends = 0
        """SEND frames a lane sent (see :meth:`feed`)."""
        self.lane_acks = 0
        """ACK frames an ACK lane settled (see :meth:`feed`)."""
        self._buffer = bytearray()
        self._failure: FrameError | None = None
        # Offsets into the buffer: where the frame being read starts (before its
        # command line: where the next line starts), where its current line starts,
        # where the next search for LF or NUL resumes, and where its body starts
        # (-1 while the headers are being read).
        self._frame_start = 0
        self._line_start = 0
        self._scan = 0
        self._body_start = -1
        self._command: str | None = None
        self._headers: list[tuple[str, str]] = []
        self._content_length: int | None = None
        self._escaped = True

    @property
    def buffered(self) -> int:
        """Bytes held between two calls to :meth:`feed`: the part of a frame
        that is not complete yet."""
        return len(self._buffer)

    @property
    def failed(self) -> bool:
        """Whether the parser has refused the stream."""
        return self._failure is not None

    def feed(
        self,
        data: bytes | bytearray | memoryview,
        lane: NativeSendLane | None = None,
        acks: NativeAckLane | None = None,
    ) -> list[Frame]:
        """The frames that ``data`` completes, in order.

        With a ``lane`` (the STOMP server's), the SEND frames it takes are
        sent natively instead, and with ``acks`` the ACK frames it takes are
        settled natively, while no frame before them is returned (so that
        the frames keep their order); :attr:`lane_sends` and
        :attr:`lane_acks` count them.

        Raises :class:`FrameError` on malformed input or input over the
        limits, carrying the frames completed before the bad bytes; every
        later call raises :class:`FrameError` too.
        """
        if self._failure is not None:
            raise FrameError(f"the stream was refused earlier: {self._failure}")
        self._buffer += data
        frames: list[Frame] = []
        try:
            while True:
                if self._body_start < 0 and self._command is None:
                    if frames:
                        self._read_whole_frames(frames, None, None)
                    else:
                        self._read_whole_frames(frames, lane, acks)
                        if _failing(lane, acks):
                            break  # no frame after the one that failed is read
                if not (self._body_start >= 0 or self._read_whole_head() or self._read_head()):
                    break
                frame = self._read_body()
                if frame is None:
                    break
                # A SEND the lane takes (usually the one a read had cut in two) goes there, while none waits before it.
                if lane is not None and not frames and frame.command == "SEND" and lane.send(frame.headers, frame.body):
                    self.lane_sends += 1
                    if _failing(lane, acks):
                        break
                    continue
                if acks is not None and not frames and frame.command == "ACK" and acks.settle(frame.headers):
                    self.lane_acks += 1
                    if _failing(lane, acks):
                        break
                    continue
                frames.append(frame)
        except FrameError as error:
            self._failure = error
            self._buffer = bytearray()
            self._frame_start = self._line_start = self._scan = 0
            raise FrameError(str(error), frames) from None
        self._discard_consumed()
        return frames

    def read_natively(
        self,
        fd: int,
        outbox: NativeOutbox,
        lane: NativeSendLane | None,
        acks: NativeAckLane | None,
        *,
        receipt_limit: int,
        wait: float,
        busy: float,
        read_size: int,
        hold: int,
    ) -> NativeRead | None:
        """Reads the non-blocking socket ``fd`` natively, without the GIL,
        while ``lane`` and ``acks`` take the frames that come (see
        ``jmsstore_core::stomp_reader``), for at most ``wait`` seconds
        without input or ``busy`` seconds with it; None (nothing read) if
        the parser holds a frame read in part, or more than ``hold`` bytes
        of one, or has refused the stream.

        An incomplete frame of at most ``hold`` bytes is carried between
        reads natively and handed back at the end. The frames after those
        the lanes took are read as :meth:`feed` reads them (its errors
        too); none after a lane's failure.
        """
        if self._failure is not None or self._command is not None or self._body_start >= 0:
            return None
        if len(self._buffer) - self._line_start > hold:
            return None
        carry = bytes(self._buffer[self._line_start :])
        self._buffer.clear()
        self._frame_start = self._line_start = self._scan = 0
        stop, rest, heartbeats, sent, acked, reads = self._whole_frames.pump(
            fd,
            carry,
            outbox,
            lane,
            acks,
            receipt_limit=receipt_limit,
            wait=wait,
            busy=busy,
            read_size=read_size,
            hold=hold,
        )
        self.heartbeats += heartbeats
        self.lane_sends += sent
        self.lane_acks += acked
        frames = self.feed(rest, lane, acks) if rest and stop != "failed" else []
        return NativeRead(stop, frames, reads)

    def _read_whole_frames(self, frames: list[Frame], lane: NativeSendLane | None, acks: NativeAckLane | None) -> None:
        """Reads, between two frames, every plain frame that is there whole
        (the common case), natively; the frame it stops at, if any, is
        read below, with every check and error message."""
        heartbeats, end, read, sent, acked = self._whole_frames.scan(self._buffer, self._line_start, lane, acks)
        if sent:
            self.lane_sends += sent
        if acked:
            self.lane_acks += acked
        if read or sent or acked:
            commands = self._commands_in_order
            frames.extend([Frame(commands[command], headers, body) for command, headers, body in read])
            self.heartbeats += heartbeats
            self._frame_start = self._line_start = self._scan = end

    # The head: heart-beats, the command line and the header lines.

    def _read_head(self) -> bool:
        """Reads complete lines; True once the blank line ending the headers is read."""
        buffer = self._buffer
        while True:
            newline = buffer.find(b"\n", self._scan)
            if newline < 0:
                self._check_partial_head()
                return False
            line_end = newline - 1 if newline > self._line_start and buffer[newline - 1] == 0x0D else newline
            line_start = self._line_start
            self._line_start = self._scan = newline + 1
            if line_end - line_start > self.limits.max_header_line_bytes:
                raise FrameError(f"a header line is longer than {self.limits.max_header_line_bytes} bytes")
            if self._command is None:
                if line_end == line_start:
                    self.heartbeats += 1
                    self._frame_start = newline + 1
                else:
                    self._command = self._parse_command(_head_text(bytes(buffer[line_start:line_end]), "command line"))
            elif line_end > line_start:
                self._add_header(_head_text(bytes(buffer[line_start:line_end]), "headers"))
            else:
                self._start_body(newline + 1)
                return True

    def _check_partial_head(self) -> None:
        """Refuses an incomplete line that can no longer become valid."""
        buffer = self._buffer
        # One byte over the line limit is a CR that the next chunk's LF may follow.
        if len(buffer) - self._line_start > self.limits.max_header_line_bytes + 1:
            raise FrameError(f"a header line is longer than {self.limits.max_header_line_bytes} bytes")
        if buffer.find(b"\x00", self._scan) >= 0:
            what = "command line" if self._command is None else "headers"
            raise FrameError(f"a NUL octet in the {what} (a frame's headers end with a blank line)")
        self._check_frame_size(len(buffer))
        self._scan = len(buffer)

    def _parse_command(self, text: str) -> str:
        command = _COMMANDS_BY_NAME.get(text)
        if command is None:
            if "\r" in text:
                raise FrameError(_LONE_CR.format("command line"))
            shown = text if len(text) <= 40 else text[:40] + "..."
            raise FrameError(f"unknown command {shown!r}: STOMP 1.2 has no such frame")
        if command not in self.commands:
            raise FrameError(f"{command} frames are not expected here")
        self._escaped = command not in UNESCAPED_COMMANDS
        return command

    def _add_header(self, text: str) -> None:
        if len(self._headers) >= self.limits.max_headers:
            raise FrameError(f"the frame has more than {self.limits.max_headers} headers")
        if "\r" in text:
            raise FrameError(_LONE_CR.format("headers"))
        name, colon, value = text.partition(":")
        if not (colon and name):
            raise _header_line_error(text)
        if self._escaped:
            name, value = _unescape(name), _unescape(value)
        self._headers.append((name, value))

    def _read_whole_head(self) -> bool:
        """Reads a frame's heart-beats and head at once when the blank line ending
        the head is in the buffer already (the common case: the same checks as
        reading line by line, in fewer steps); False otherwise, or when the
        head has been read in part already."""
        if self._command is not None:
            return False
        limits = self.limits
        # The plain case natively; anything else (and every error) is read below.
        plain = scan_head(
            self._buffer, self._line_start, limits.max_frame_bytes, limits.max_header_line_bytes, limits.max_headers
        )
        if plain is not None:
            heartbeats, start, command, headers, body_start = plain
            self.heartbeats += heartbeats
            self._frame_start = self._line_start = self._scan = start
            self._command = self._parse_command(command)
            self._headers = headers
            self._start_body(body_start)
            return True
        buffer = self._buffer
        start = self._line_start
        while True:
            if buffer.startswith(b"\n", start):
                start += 1
            elif buffer.startswith(b"\r\n", start):
                start += 2
            else:
                break
            self.heartbeats += 1
        self._frame_start = self._line_start = self._scan = start
        # The first blank line: after an LF, an LF or a CR LF.
        search_end = start + self.limits.max_frame_bytes + 3
        blank = buffer.find(b"\n\n", start, search_end)
        blank_crlf = buffer.find(b"\n\r\n", start, blank + 3 if blank >= 0 else search_end)
        if blank_crlf >= 0:
            head_end, body_start = blank_crlf, blank_crlf + 3
        elif blank >= 0:
            head_end, body_start = blank, blank + 2
        else:
            return False
        head = bytes(buffer[start:head_end])
        if len(head) > limits.max_header_line_bytes:
            for raw_line in head.split(b"\n"):
                if len(raw_line) - raw_line.endswith(b"\r") > limits.max_header_line_bytes:
                    raise FrameError(f"a header line is longer than {limits.max_header_line_bytes} bytes")
        text = _head_text(head, "headers")
        lines = text.split("\n")
        if "\r" in text:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
            if any("\r" in line for line in lines):
                raise FrameError(_LONE_CR.format("headers"))
        if len(lines) - 1 > limits.max_headers:
            raise FrameError(f"the frame has more than {limits.max_headers} headers")
        self._command = self._parse_command(lines[0])
        headers = self._headers
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not (colon and name):
                raise _header_line_error(line)
            headers.append((name, value))
        if self._escaped and "\\" in text:
            self._headers = [(_unescape(name), _unescape(value)) for name, value in headers]
        self._start_body(body_start)
        return True

    def _start_body(self, body_start: int) -> None:
        command = self._command
        assert command is not None
        self._body_start = self._scan = body_start
        length_text = None
        for name, value in self._headers:
            if name == "content-length":
                length_text = value
                break
        if length_text is None:
            self._content_length = None
            return
        if not (length_text.isascii() and length_text.isdigit()):
            raise FrameError(f"content-length must be a number of bytes, not {length_text[:40]!r}")
        # Leading zeros stripped first: int() refuses strings of over 4300 digits.
        digits = length_text.lstrip("0") or "0"
        length = int(digits) if len(digits) <= 20 else self.limits.max_body_bytes + 1
        if length > 0 and command not in BODY_COMMANDS:
            raise FrameError(f"{command} frames may not have a body")
        if length > self.limits.max_body_bytes:
            raise FrameError(f"the body is larger than {self.limits.max_body_bytes} bytes")
        self._check_frame_size(body_start + length + 1)
        self._content_length = length

    # The body and the NUL ending the frame.

    def _read_body(self) -> Frame | None:
        buffer = self._buffer
        command = self._command
        assert command is not None
        body_start = self._body_start
        if self._content_length is not None:
            end = body_start + self._content_length
            if len(buffer) <= end:
                return None
            if buffer[end] != 0:
                raise FrameError(f"the body is not followed by a NUL octet at its content-length of {end - body_start}")
        else:
            end = buffer.find(b"\x00", self._scan)
            if end < 0:
                self._check_body_so_far(len(buffer))
                self._scan = len(buffer)
                return None
            self._check_body_so_far(end)
            self._check_frame_size(end + 1)
        frame = Frame(command, self._headers, _copy(buffer, body_start, end) if end > body_start else b"")
        self._frame_start = self._line_start = self._scan = end + 1
        self._body_start = -1
        self._command = None
        self._headers = []
        return frame

    def _check_body_so_far(self, end: int) -> None:
        """Checks a body without content-length, read up to ``end``."""
        length = end - self._body_start
        if length > 0 and self._command not in BODY_COMMANDS:
            raise FrameError(f"{self._command} frames may not have a body")
        if length > self.limits.max_body_bytes:
            raise FrameError(f"the body is larger than {self.limits.max_body_bytes} bytes")
        self._check_frame_size(end)

    def _check_frame_size(self, end: int) -> None:
        if end - self._frame_start > self.limits.max_frame_bytes:
            raise FrameError(f"the frame is larger than {self.limits.max_frame_bytes} bytes")

    def _discard_consumed(self) -> None:
        consumed = self._frame_start
        if consumed == len(self._buffer):
            self._buffer.clear()
        elif consumed:
            del self._buffer[:consumed]
        else:
            return
        self._frame_start = 0
        self._line_start -= consumed
        self._scan -= consumed
        if self._body_start >= 0:
            self._body_start -= consumed


# ------------------------------------------------------------------ encoder


def _failing(lane: NativeSendLane | None, acks: NativeAckLane | None) -> bool:
    """Whether a lane's send or acknowledgement failed (and its reader has
    not taken the failure yet): no frame after it is read."""
    return (lane is not None and lane.failure_kept) or (acks is not None and acks.failure_kept)


def _check_unescaped(command: str, name: str, value: str) -> None:
    if ":" in name or any(c in text for text in (name, value) for c in "\r\n"):
        raise FrameError(
            f"a {command} frame's headers are not escaped, so header {name!r} cannot hold"
            " a line break (nor its name a ':')"
        )


def encode(frame: Frame, *, add_content_length: bool = True) -> bytes:
    """The frame as STOMP 1.2 bytes, ending with its NUL octet.

    Header names and values are escaped, except in CONNECT, STOMP and
    CONNECTED frames. A body gets a ``content-length`` header unless the
    frame has one (it must then match) or ``add_content_length`` is false
    (the body may then hold no NUL: ActiveMQ, for one, takes a SEND without
    content-length for a text message). Raises :class:`FrameError` for a
    frame the parser would not read back as it is: an unknown command, a
    body on a frame that may not have one, an empty header name, a NUL or
    a lone surrogate in a header, a line break in an unescaped header.
    """
    command = frame.command
    if command not in ALL_COMMANDS:
        raise FrameError(f"unknown command {command!r}: STOMP 1.2 has no such frame")
    body = frame.body
    if body and command not in BODY_COMMANDS:
        raise FrameError(f"{command} frames may not have a body")
    escaped = command not in UNESCAPED_COMMANDS
    if escaped and add_content_length:
        # The common case natively; anything it declines (and every error) is written below.
        data = encode_plain(command, frame.headers, body)
        if data is not None:
            return data
    lines = [str(command)]
    for name, value in frame.headers:
        if not name:
            raise FrameError("a header name may not be empty")
        if "\x00" in name or "\x00" in value:
            raise FrameError(f"header {name!r} holds a NUL character")
        if escaped:
            lines.append(f"{_escape(name)}:{_escape(value)}")
        else:
            _check_unescaped(command, name, value)
            lines.append(f"{name}:{value}")
    declared = frame.header("content-length")
    if declared is not None:
        if declared != str(len(body)):
            raise FrameError(f"content-length is {declared!r} but the body has {len(body)} bytes")
    elif body:
        if add_content_length:
            lines.append(f"content-length:{len(body)}")
        elif b"\x00" in body:
            raise FrameError("a body holding a NUL octet needs a content-length header")
    lines.append("\n")
    try:
        head = "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError as error:
        raise FrameError(f"the headers are not valid text: a lone surrogate at index {error.start}") from None
    return b"".join((head, body, b"\x00"))


def error_frame(message: str, receipt_id: str | None = None, details: str = "") -> Frame:
    """An ERROR frame: ``message`` is a one-line summary (line breaks are
    escaped), ``receipt_id`` the receipt of the frame that failed, if it
    asked for one, and ``details`` the body, sent as UTF-8 text."""
    headers = [("message", message)]
    if receipt_id is not None:
        headers.append(("receipt-id", receipt_id))
    body = details.encode("utf-8")
    if body:
        headers.append(("content-type", "text/plain;charset=utf-8"))
    return Frame(Command.ERROR, headers, body)
