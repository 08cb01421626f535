"""One STOMP 1.2 connection from a client to a server: the socket, the
CONNECT handshake, the reader thread and the receipts waited for.

The reader thread reads frames in order and hands each to whoever waits
for it: a MESSAGE to its subscription's inbox, a RECEIPT to the call that
asked for it. It also sends heart-beats and gives up on a server silent for
twice the negotiated interval. When the connection fails (an ERROR frame,
a dropped socket, a receipt that never comes), every call waiting on it is
woken with the error and every later call raises it: nothing waits
forever for a server that is gone.
"""

from __future__ import annotations

import itertools
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Protocol

from jmsstore.errors import JmsStoreError, MessageTooLargeError
from jmsstore.net.remote.errors import StompConnectionError, UnsupportedOverStompError, server_error
from jmsstore.net.stomp import heartbeat
from jmsstore.net.stomp.connection import FRAME_LIMITS_HEADER, parse_frame_limits
from jmsstore.net.stomp.frames import SERVER_COMMANDS, Command, Frame, FrameError, FrameLimits, FrameParser, encode
from jmsstore.net.stomp.mapping import EXTENSIONS_HEADER, RECALL_EXTENSION
from jmsstore.net.stomp.transport import PlainTransport, TlsTransport

__all__ = ["Inbox", "StompLink"]

log = logging.getLogger("jmsstore.net.remote")

_READ_SIZE = 64 * 1024

# A receipted write's outcome: the error, or None and the RECEIPT frame.
Outcome = Callable[[JmsStoreError | None, Frame | None], None]


class Inbox(Protocol):
    """Where a subscription's MESSAGE frames go (called on the reader thread)."""

    def arrived(self, frame: Frame) -> None: ...

    def lost(self) -> None:
        """The connection failed: waiters must wake up and see it."""


class _Receipt:
    """A call waiting for a RECEIPT."""

    __slots__ = ("done", "error", "receipt")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: JmsStoreError | None = None
        self.receipt: Frame | None = None

    def settle(self, error: JmsStoreError | None, receipt: Frame | None) -> None:
        self.error = error
        self.receipt = receipt
        self.done.set()


class StompLink:
    """A STOMP 1.2 connection to ``address`` (see the module documentation).

    ``heart_beat``: (we send at least every N ms, we want the server to
    send every M ms), negotiated with the server's. ``timeout`` (s) bounds
    the connect (and its TLS handshake), each write, and each wait for a
    RECEIPT. With ``tls``, the connection runs over TLS and the server's
    certificate is checked as that context says, against the host name."""

    def __init__(
        self,
        address: tuple[str, int],
        login: str | None,
        passcode: str | None,
        client_id: str | None,
        heart_beat: tuple[int, int],
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._tls = tls
        self.speaks_jmsstore = False  # the server said it is jmsstore's (CONNECTED's server header)
        self.recalls = False  # it takes a recall (RECALL_HEADER): CONNECTED lists the extension
        # The frame limits the server announced (jmsstore's, in CONNECTED): a frame over
        # them is refused here, before it is sent, as the server would end the connection.
        self.frame_limits: FrameLimits | None = None
        # The names of the temporary queues this connection made (/temp-queue/NAME on the server).
        self.temporary_queues: set[str] = set()
        self.client_id = client_id
        self._login = login
        self._passcode = passcode
        self._heart_beat = heart_beat
        self._timeout = timeout
        self._parser = FrameParser(commands=SERVER_COMMANDS)
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()  # the state below
        self._receipts: dict[str, Outcome] = {}
        self._inboxes: dict[str, Inbox] = {}
        self._failure: JmsStoreError | None = None
        self._closing = False  # close() has begun: the end of the connection is no failure to report
        self._closed = False
        self._ids = itertools.count(1)
        self._send_interval = 0.0
        self._receive_interval = 0.0
        self._last_read = self._last_write = time.monotonic()
        self._transport = self._connect()
        self._reader = threading.Thread(target=self._run, name=f"jmsstore-remote-{address[1]}", daemon=True)
        self._reader.start()

    @property
    def where(self) -> str:
        scheme = "stomp+ssl" if self._tls is not None else "stomp"
        return f"{scheme}://{self.address[0]}:{self.address[1]}"

    def next_id(self) -> str:
        """A fresh id for a subscription, receipt or transaction on this connection."""
        return str(next(self._ids))

    # ------------------------------------------------------------ the handshake

    def _connect(self) -> PlainTransport:
        try:
            sock = socket.create_connection(self.address, timeout=self._timeout)
        except OSError as e:
            raise StompConnectionError(f"cannot connect to {self.where}: {e.strerror or e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a receipt waits on the last frame
            transport = self._secure(sock) if self._tls is not None else PlainTransport(sock)
            headers = [("accept-version", "1.2"), ("host", self.address[0])]
            headers.append(("heart-beat", f"{self._heart_beat[0]},{self._heart_beat[1]}"))
            if self._login is not None:
                headers.append(("login", self._login))
            if self._passcode is not None:
                headers.append(("passcode", self._passcode))
            if self.client_id is not None:
                headers.append(("client-id", self.client_id))
            transport.sendall(encode(Frame(Command.CONNECT, headers)))
            connected = self._first_frame(transport, time.monotonic() + self._timeout)
            self._negotiate(connected)
        except OSError as e:
            sock.close()
            raise StompConnectionError(f"connecting to {self.where}: {e.strerror or e}") from None
        except BaseException:
            sock.close()
            raise
        return transport

    def _secure(self, sock: socket.socket) -> TlsTransport:
        assert self._tls is not None
        transport = TlsTransport(sock, self._tls, server_hostname=self.address[0])
        try:
            transport.handshake(self._timeout)
        except ssl.SSLError as e:
            raise StompConnectionError(f"the TLS handshake with {self.where} failed: {e.reason or e}") from None
        except (OSError, TimeoutError) as e:
            raise StompConnectionError(f"the TLS handshake with {self.where} failed: {e}") from None
        return transport

    def _first_frame(self, transport: PlainTransport, deadline: float) -> Frame:
        sock = transport.sock
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StompConnectionError(f"no CONNECTED frame from {self.where} within {self._timeout:g} s")
            sock.settimeout(remaining)
            try:
                data = transport.recv(_READ_SIZE)
            except TimeoutError:
                continue
            except OSError as e:
                raise StompConnectionError(f"connecting to {self.where}: {e.strerror or e}") from None
            if data is None:
                raise StompConnectionError(f"{self.where} closed the connection before CONNECTED")
            if not data:
                continue  # part of a TLS record
            try:
                frames = self._parser.feed(data)
            except FrameError as e:
                raise StompConnectionError(f"{self.where} sent a malformed frame: {e}") from None
            if not frames:
                continue
            first = frames[0]
            if first.command == Command.ERROR:
                raise server_error(first.header("message") or "ERROR frame without a message")
            if first.command != Command.CONNECTED:
                raise StompConnectionError(f"{self.where} answered CONNECT with {first.command}")
            if len(frames) > 1:
                raise StompConnectionError(f"{self.where} sent {frames[1].command} before we subscribed")
            sock.settimeout(self._timeout)
            return first

    def _negotiate(self, connected: Frame) -> None:
        # jmsstore's own server understands its extensions (see ``speaks_jmsstore``).
        self.speaks_jmsstore = (connected.header("server") or "").startswith("jmsstore/")
        extensions = (connected.header(EXTENSIONS_HEADER) or "").split(",")
        self.recalls = self.speaks_jmsstore and RECALL_EXTENSION in extensions
        if self.speaks_jmsstore:
            self.frame_limits = parse_frame_limits(connected.header(FRAME_LIMITS_HEADER))
        version = connected.header("version", "1.0")
        if version != "1.2":
            raise StompConnectionError(f"{self.where} speaks STOMP {version}; this client speaks 1.2")
        text = connected.header("heart-beat", "0,0") or "0,0"
        try:
            server_send, server_receive = (int(part) for part in text.split(","))
        except ValueError:
            raise StompConnectionError(f"{self.where} sent a malformed heart-beat header {text[:40]!r}") from None
        self._send_interval = heartbeat.negotiated(self._heart_beat[0], server_receive) / 1000
        self._receive_interval = heartbeat.negotiated(self._heart_beat[1], server_send) / 1000

    # ------------------------------------------------------------ writing

    def check(self) -> None:
        """Raises the connection's failure, if it failed."""
        failure = self._failure
        if failure is not None:
            raise StompConnectionError(f"the connection to {self.where} is lost: {failure}")

    def encoded(self, frame: Frame) -> bytes:
        """The frame's bytes, if it can be sent: else
        :class:`UnsupportedOverStompError` (STOMP cannot carry it) or
        ``MessageTooLargeError`` (over the frame limits the server
        announced). Nothing is sent: the connection goes on."""
        try:
            # Never with content-length added: a SEND without it is a text message.
            data = encode(frame, add_content_length=False)
        except FrameError as e:
            raise UnsupportedOverStompError(f"a {frame.command} frame has no STOMP form: {e}") from None
        limits = self.frame_limits
        if limits is not None and frame.command == Command.SEND:
            self._check_size(data, len(frame.body), limits)
        return data

    def _check_size(self, data: bytes, body: int, limits: FrameLimits) -> None:
        where = f"the server at {self.where}"
        if len(data) > limits.max_frame_bytes:
            raise MessageTooLargeError(
                f"the message's SEND frame is {len(data)} bytes; {where} takes frames of at most "
                f"{limits.max_frame_bytes} bytes"
            )
        if body > limits.max_body_bytes:
            raise MessageTooLargeError(
                f"the message's body is {body} bytes; {where} takes bodies of at most {limits.max_body_bytes} bytes"
            )
        head = data[: data.find(b"\n\n")].split(b"\n")  # an escaped head holds no other line break
        if len(head) - 1 > limits.max_headers:
            raise MessageTooLargeError(
                f"the message's SEND frame has {len(head) - 1} headers; {where} takes at most {limits.max_headers}"
            )
        longest = max(len(line) for line in head)
        if longest > limits.max_header_line_bytes:
            raise MessageTooLargeError(
                f"the message's SEND frame has a header line of {longest} bytes; {where} takes lines of at most "
                f"{limits.max_header_line_bytes} bytes"
            )

    def write(self, frames: list[Frame], outcome: Outcome | None = None) -> int:
        """Writes ``frames`` in one go; with ``outcome``, the last asks for a
        receipt and ``outcome(error, receipt)`` is called on the reader thread
        once it comes (``error`` None, the RECEIPT frame) or the connection
        fails (the error, None). Returns the bytes written. A frame that
        cannot be sent raises as :meth:`encoded` says, and none is sent."""
        if outcome is not None:
            receipt = f"r-{self.next_id()}"
            last = frames[-1]
            frames[-1] = Frame(last.command, [*last.headers, ("receipt", receipt)], last.body)
        data = b"".join([self.encoded(frame) for frame in frames])
        with self._lock:
            self.check()
            if outcome is not None:
                self._receipts[receipt] = outcome
        with self._write_lock:
            try:
                self._transport.sendall(data)
            except OSError as e:
                error = StompConnectionError(f"writing to {self.where}: {e.strerror or e}")
                if outcome is not None:
                    with self._lock:
                        self._receipts.pop(receipt, None)  # the caller hears of it from the raise alone
                self._fail(error)
                raise error from None
            self._last_write = time.monotonic()
        return len(data)

    def request(self, frames: list[Frame], what: str) -> Frame:
        """Writes ``frames`` and waits for the receipt of the last: the server
        has handled them all. Returns the RECEIPT frame. Raises the server's
        error, or :class:`StompConnectionError` when the connection fails or
        the receipt does not come within the timeout."""
        waiting = _Receipt()
        self.write(frames, waiting.settle)
        if not waiting.done.wait(self._timeout):
            error = StompConnectionError(f"no RECEIPT for {what} from {self.where} within {self._timeout:g} s")
            self._fail(error)  # what happened is unknown: the connection cannot go on
            raise error
        if waiting.error is not None:
            raise waiting.error
        assert waiting.receipt is not None
        return waiting.receipt

    # ------------------------------------------------------------ subscriptions

    def add_inbox(self, subscription_id: str, inbox: Inbox) -> None:
        with self._lock:
            self.check()
            self._inboxes[subscription_id] = inbox

    def remove_inbox(self, subscription_id: str) -> None:
        with self._lock:
            self._inboxes.pop(subscription_id, None)

    def inboxes(self) -> list[Inbox]:
        """The subscriptions' inboxes, now."""
        with self._lock:
            return list(self._inboxes.values())

    # ------------------------------------------------------------ the reader

    def _run(self) -> None:
        try:
            self._read_loop()
        except OSError as e:
            self._fail(StompConnectionError(f"the connection to {self.where} broke: {e.strerror or e}"))
        except Exception as e:
            log.exception("reading from %s", self.where)
            self._fail(StompConnectionError(f"reading from {self.where} failed: {e}"))

    def _read_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._transport.sock, selectors.EVENT_READ)
            while self._failure is None:
                now = time.monotonic()
                if self._receive_interval and now - self._last_read > 2 * self._receive_interval:
                    silence = 2 * self._receive_interval
                    self._fail(StompConnectionError(f"no heart-beat from {self.where} for {silence:g} s"))
                    return
                # At half the interval: a late wake-up on a busy machine still keeps within it.
                if self._send_interval and now - self._last_write >= self._send_interval / 2:
                    self._beat()
                if not self._transport.buffered() and not selector.select(self._tick()):
                    continue
                data = self._transport.recv(_READ_SIZE)
                if data is None:
                    self._fail(StompConnectionError(f"{self.where} closed the connection"))
                    return
                self._last_read = time.monotonic()
                if not data:
                    continue  # part of a TLS record
                try:
                    frames = self._parser.feed(data)
                except FrameError as e:
                    for frame in e.frames:
                        self._handle(frame)
                    self._fail(StompConnectionError(f"{self.where} sent a malformed frame: {e}"))
                    return
                for frame in frames:
                    self._handle(frame)

    def _tick(self) -> float:
        return heartbeat.tick(self._send_interval, self._receive_interval)

    def _beat(self) -> None:
        # Skipped while a frame is being written: that is a sign of life too.
        if not self._write_lock.acquire(blocking=False):
            return
        try:
            self._transport.sendall(b"\n")
            self._last_write = time.monotonic()
        except OSError as e:
            self._fail(StompConnectionError(f"writing to {self.where}: {e.strerror or e}"))
        finally:
            self._write_lock.release()

    def _handle(self, frame: Frame) -> None:
        if frame.command == Command.MESSAGE:
            with self._lock:
                inbox = self._inboxes.get(frame.header("subscription") or "")
            if inbox is not None:
                inbox.arrived(frame)
            # Else the subscription has just been unsubscribed: the server takes the message back.
        elif frame.command == Command.RECEIPT:
            with self._lock:
                outcome = self._receipts.pop(frame.header("receipt-id") or "", None)
            if outcome is not None:
                outcome(None, frame)
        elif frame.command == Command.ERROR:
            error = server_error(frame.header("message") or "ERROR frame without a message")
            with self._lock:
                outcome = self._receipts.pop(frame.header("receipt-id") or "", None)
            if outcome is not None:
                outcome(error, None)  # the call that asked gets the server's own error
            self._fail(error)

    # ------------------------------------------------------------ failing and closing

    def _fail(self, error: JmsStoreError) -> None:
        """The connection is unusable: wakes everything waiting on it."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = error
            receipts, self._receipts = self._receipts, {}
            inboxes = list(self._inboxes.values())
        self._transport.shutdown()
        if not self._closing:
            log.warning("stomp connection to %s failed: %s", self.where, error)
        lost = StompConnectionError(f"the connection to {self.where} is lost: {error}")
        for outcome in receipts.values():
            outcome(lost, None)
        for inbox in inboxes:
            inbox.lost()

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def close(self) -> None:
        """DISCONNECT (its receipt says the server has handled everything
        before it), then the socket closes. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing = True
        if self._failure is None:
            try:
                self.request([Frame(Command.DISCONNECT)], "DISCONNECT")
            except JmsStoreError as e:
                log.info("disconnecting from %s: %s", self.where, e)
        self._fail(StompConnectionError("the connection is closed"))
        if self._reader is not threading.current_thread():
            self._reader.join(self._timeout)
        self._transport.close()
