"""One STOMP client connection: its reader thread, which handles the
frames in order, and what they change (subscriptions, transactions).

The reader thread reads bytes, feeds the frame parser and handles each
frame before the next; it also sends heart-beats and cuts off a client
that has been silent for twice the negotiated interval, one that has not
sent CONNECT within ``connect_timeout``, one whose frame has not been
completed within ``frame_timeout`` of its start, and (when set) one that
has sent nothing for ``idle_timeout``. What its parser holds of an
incomplete frame is charged to the server's ``max_buffered_bytes``. Writes come from
the reader (CONNECTED, RECEIPT, ERROR) and from the subscriptions'
dispatchers (MESSAGE), one at a time under the connection's write lock (the native
:class:`~jmsstore._native.NativeOutbox`, which the broker's completer
thread takes too); a write to a client that does not read blocks up to
``write_timeout``, then the connection is dropped.

A RECEIPT is sent once the frame's effect is durable: a SEND that asks
for one is stored (if persistent) and visible first; an ACK's delete, a
COMMIT's store transaction are written first. RECEIPTs go out in the
order of the frames that asked for them. A receipted SEND does not hold
up the frames after it: it is handed to the broker without waiting, and
its RECEIPT waits in the connection's queue of pending receipts (kept by
the outbox) until the store has it (a client that pipelines its sends has
them share one group commit). The thread that learns it is durable writes
it if that needs no wait (the broker's completer, for a SEND the send lane
took; else the callback thread), or wakes the reader to; a SEND whose write fails gets an ERROR frame carrying its
``receipt-id``, never a RECEIPT, and the connection closes. At most
``max_pending_receipts`` wait at once: the reader stops reading until
the oldest is durable. SENDs without a receipt go on without waiting
for the disk too (their failure ends the connection with an ERROR
frame). In a transaction, SENDs are staged and ACKs set aside
until COMMIT applies them in one store transaction; ABORT drops the
sends and returns the messages acknowledged (or NACKed) in it for
redelivery. Any protocol error, malformed frame or failed operation
gets an ERROR frame and the connection closes, as STOMP 1.2 says.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from jmsstore._native import NativeAckLane, NativeDestination, NativeOutbox, NativeSendLane, __version__
from jmsstore.client.port import BrokerPort, Delivery, ProducerPort, SendOptions
from jmsstore.errors import InvalidArgumentError, InvalidDestinationError, JmsStoreError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic, check_name
from jmsstore.net.stomp import heartbeat
from jmsstore.net.stomp.frames import (
    CLIENT_COMMANDS,
    Command,
    Frame,
    FrameError,
    FrameLimits,
    FrameParser,
    encode,
    error_frame,
)
from jmsstore.net.stomp.mapping import (
    EXTENSIONS_HEADER,
    RECALL_EXTENSION,
    RECALL_HEADER,
    REMOTE_TEMP_QUEUE,
    UNSEEN_HEADER,
    ProtocolError,
    destination_name,
    outgoing_message,
    parse_destination,
)
from jmsstore.net.stomp.resources import ByteBudget, Slots
from jmsstore.net.stomp.security import Security, User
from jmsstore.net.stomp.settings import StompSettings
from jmsstore.net.stomp.statistics import FrameCounts, StompStatistics
from jmsstore.net.stomp.subscription import ACK_MODES, Subscription
from jmsstore.net.stomp.transport import PlainTransport, TlsTransport
from jmsstore.selector import Selector

__all__ = ["FRAME_LIMITS_HEADER", "StompConnection", "frame_limits_text", "parse_frame_limits"]

log = logging.getLogger("jmsstore.net.stomp")

_READ_SIZE = 64 * 1024

# While its lanes take what comes and the client does not stream (fill whole
# reads), a connection's socket is read natively
# (FrameParser.read_natively), handed back at least this often (seconds) so
# that the reader looks again at its destinations (a pause or flow control
# armed since sends them the Python path), and holding at most this many
# bytes of an incomplete frame (more is charged to the server's budget).
_NATIVE_BUSY = 0.05
_NATIVE_HOLD = 64 * 1024

# The most destinations one connection's SENDs take the native lane to: each
# is looked at once per read (a pause or a deletion since sends it back to
# the Python path), so that work stays small; sends to others take the Python path.
_LANE_DESTINATIONS = 8

# A jmsstore extension in CONNECTED: the server's frame limits
# (``frame=BYTES,body=BYTES,header-line=BYTES,headers=COUNT``), so that jmsstore's
# client refuses a frame over them before sending it (the parser's ERROR would end
# the connection). Other clients ignore a header they do not know.
FRAME_LIMITS_HEADER = "jmsstore.frame-limits"


# The server-wide names the broker gives temporary queues (TEMP.SERVER.BOOT.N): a
# client may not make or use a queue of such a name through /queue/..., or it could
# take the name of another connection's next temporary queue before it is made.
_TEMPORARY_NAME = re.compile(r"TEMP\..+\.[0-9]+\.[0-9]+")


def frame_limits_text(limits: FrameLimits) -> str:
    """The value of :data:`FRAME_LIMITS_HEADER` for ``limits``."""
    return (
        f"frame={limits.max_frame_bytes},body={limits.max_body_bytes},"
        f"header-line={limits.max_header_line_bytes},headers={limits.max_headers}"
    )


def parse_frame_limits(text: str | None) -> FrameLimits | None:
    """The limits a :data:`FRAME_LIMITS_HEADER` value announces (None: none, or not readable)."""
    if not text:
        return None
    keys = {"frame": "max_frame_bytes", "body": "max_body_bytes", "header-line": "max_header_line_bytes"}
    keys["headers"] = "max_headers"
    values: dict[str, str] = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key in keys:
            values[keys[key]] = value
    if len(values) != len(keys) or not all(v.isascii() and v.isdigit() and len(v) <= 18 for v in values.values()):
        return None
    try:
        return FrameLimits(**{k: int(v) for k, v in values.items()})
    except (ValueError, TypeError, JmsStoreError):
        return None


class _Server(Protocol):
    """What a connection needs of its server."""

    @property
    def settings(self) -> StompSettings: ...

    @property
    def stats(self) -> StompStatistics: ...

    @property
    def port(self) -> BrokerPort: ...

    @property
    def send_options(self) -> SendOptions: ...

    @property
    def frame_limits(self) -> FrameLimits: ...

    @property
    def buffers(self) -> ByteBudget: ...

    @property
    def subscription_slots(self) -> Slots: ...

    @property
    def security(self) -> Security: ...

    def ensure_destination(self, destination: Destination) -> None: ...

    def forget(self, connection: StompConnection) -> None: ...


@dataclass(slots=True)
class _Transaction:
    """A BEGIN's sends and acknowledgements, applied at COMMIT."""

    staged: list[object] = field(default_factory=list)
    acks: list[Delivery] = field(default_factory=list)
    nacks: list[Delivery] = field(default_factory=list)


@dataclass(slots=True)
class _Receipt:
    """The receipt of the frame being handled: its ticket in the outbox's
    queue, and whether it is done only once the broker says so (a SEND)."""

    ticket: int
    asynchronous: bool = False


def _heart_beat(text: str) -> tuple[int, int]:
    parts = [p.strip() for p in text.split(",")]
    # ASCII digits: str.isdigit also takes "²", which int() does not.
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 10 for p in parts):
        raise ProtocolError(f"heart-beat must be two whole numbers of milliseconds, 'cx,cy', not {text[:40]!r}")
    return int(parts[0]), int(parts[1])


class StompConnection:
    """A client connected over STOMP 1.2 (see the module documentation)."""

    _serials = itertools.count(1)

    def __init__(self, server: _Server, sock: socket.socket, peer: str, tls: ssl.SSLContext | None = None) -> None:
        self._server = server
        self._settings = server.settings
        self._stats = server.stats
        self._frames = server.stats.frame_counts()
        self._port = server.port
        self._sock = sock
        self._transport = PlainTransport(sock) if tls is None else TlsTransport(sock, tls)
        self._plain = tls is None
        # Subscriptions dispatched by the broker core write to the outbox's socket.
        self._native_dispatch = self._plain and self._settings.native_dispatch
        self._read_fd = -1  # the reader's duplicate of a plain socket, while it reads
        # The last read filled its buffer: the client streams, and many frames share
        # each read; its socket is read here, not natively, until a read does not.
        self._streaming = False
        self.peer = peer
        self.session = f"jmsstore-{next(self._serials)}"
        self._parser = FrameParser(server.frame_limits, CLIENT_COMMANDS)
        self._buffers = server.buffers
        self._charged = 0  # bytes of an incomplete frame charged to the server's budget
        self._charge_lock = threading.Lock()  # the reader charges, close releases
        self._frame_started: float | None = None  # when the incomplete frame held began
        # The write lock, the receipts in frame order and the reader's wake-up,
        # shared with the broker's native threads (a plain socket's receipts are
        # written by whoever completes them, where that needs no wait).
        self._outbox = NativeOutbox(sock.fileno() if tls is None else None)
        self._frames.count_receipts(self._outbox)
        self._frame_lock = threading.Lock()  # held while a frame is handled: close waits for it
        self._close_lock = threading.Lock()
        self._closed = False
        self._released = False  # what it holds in the broker given back
        self._connected = False
        self._connection_id = 0
        self.client_id: str | None = None
        self.user: User | None = None
        self._producer: ProducerPort | None = None
        # SENDs sent without Python (StompSettings.native_sends): the lane, and the
        # destinations it may take, by the destination header's text, with the
        # native handle given to the lane (None: not now; see _lane_for_reading).
        self._lane: NativeSendLane | None = None
        self._lane_destinations: dict[str, tuple[Destination, NativeDestination | None]] = {}
        self._lane_sends_seen = 0  # the parser's count of them when last looked at
        # Plain ACK frames settled without Python (with the lane): the subscriptions
        # in a client mode are registered with it.
        self._acks: NativeAckLane | None = None
        self._lane_acks_seen = 0
        self._subscriptions: dict[str, Subscription] = {}
        self._by_serial: dict[int, Subscription] = {}
        self._subscription_serials = itertools.count(1)
        self._transactions: dict[str, _Transaction] = {}
        # The client's /temp-queue/NAME -> this connection's temporary queue (deleted when it closes).
        self._temporary: dict[str, TemporaryQueue] = {}
        # Sends without a receipt not yet durable, and the first of them that failed.
        self._pending = threading.Condition()
        self._pending_sends = 0
        self._send_failure: BaseException | None = None
        self._current_receipt: _Receipt | None = None  # of the frame being handled
        self._send_interval = 0.0  # seconds between our heart-beats (0: none)
        self._receive_interval = 0.0  # the client's (0: none)
        self._last_read = time.monotonic()
        self._last_write = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"jmsstore-stomp-{peer}", daemon=True)

    def start(self) -> None:
        self._sock.settimeout(self._settings.write_timeout)
        self._thread.start()

    def abandon(self) -> None:
        """A connection that could not start lets go of its socket's
        duplicate at once (the server closes the socket itself)."""
        with self._outbox:
            self._outbox.close()

    @property
    def subscriptions(self) -> int:
        return len(self._subscriptions)

    @property
    def frames(self) -> FrameCounts:
        """This connection's frame counters (the server retires them when it closes)."""
        return self._frames

    # ------------------------------------------------------------ writing

    def _write(self, frame: Frame) -> None:
        self._write_frames([frame])

    def _write_frames(self, frames: list[Frame]) -> None:
        """Several frames in one write (one system call, one TCP segment where they fit)."""
        data = b"".join([encode(frame) for frame in frames])
        self._write_encoded(data, [(frame.command, 1) for frame in frames])

    def _write_messages(self, data: bytes, count: int) -> None:
        """``count`` MESSAGE frames, encoded already, in one write."""
        self._write_encoded(data, [(Command.MESSAGE, count)])

    def _write_encoded(self, data: bytes, counts: list[tuple[str, int]]) -> None:
        """Writes ``data`` after what an earlier write left (the outbox's
        tail), and counts its frames: ``counts`` of each command."""
        with self._outbox:
            self._send_locked(data, counts)

    def _send_locked(self, data: bytes, counts: list[tuple[str, int]]) -> None:
        """Writes ``data`` after what an earlier write left (the outbox's tail;
        nothing if both are empty), and counts its frames. The caller holds
        the write lock."""
        tail = self._outbox.take_tail()
        if not (data or tail):
            return
        try:
            self._transport.sendall(tail + data if tail else data)
        except OSError:
            self._break()
            raise
        self._last_write = time.monotonic()
        for command, count in counts:  # under the write lock: the counters take none of their own
            self._frames.frame_out(command, count)

    def _quiet_for(self, now: float) -> float:
        """Seconds since anything was written to the client (by this
        connection's Python threads or natively: MESSAGE frames, RECEIPTs)."""
        return now - max(self._last_write, self._outbox.last_write_ns / 1e9)

    def _heart_beat(self) -> None:
        # Skipped if a frame is being written: that is a sign of life too.
        if not self._outbox.acquire(False):
            return
        try:
            self._send_locked(b"\n", [])
        except OSError:
            pass  # the socket is broken: the reader closes the connection
        finally:
            self._outbox.release()

    def _break(self) -> None:
        """The socket is unusable: wakes the reader so that it closes the connection."""
        self._transport.shutdown()

    def _error(
        self,
        message: str,
        frame: Frame | None = None,
        extra: list[tuple[str, str]] | None = None,
        receipt: str | None = None,
    ) -> None:
        """Sends an ERROR frame (the connection closes after it), with the
        ``receipt-id`` of the frame (or receipt) that failed."""
        if frame is not None:
            receipt = frame.header("receipt")
        error = error_frame(message.replace("\n", " "), receipt)
        if extra:
            error.headers.extend(extra)
        with contextlib.suppress(OSError, FrameError):
            self._write(error)
        log.info("stomp %s (%s): ERROR %s", self.peer, self.session, message)

    def fail(self, reason: str) -> None:
        """Ends the connection with an ERROR frame, from any thread."""
        if self._closed:
            return
        self._error(reason)
        self._break()

    # ------------------------------------------------------------ the reader

    def _run(self) -> None:
        reason = "closed by the client"
        try:
            try:
                self._transport.handshake(self._settings.connect_timeout)
            except (OSError, ssl.SSLError) as e:
                reason = f"TLS handshake failed: {e}"
                return
            # The reader's own duplicate of the socket, for reading natively: another
            # thread's close() cannot make its number another connection's while it reads.
            self._read_fd = os.dup(self._sock.fileno()) if self._plain else -1
            try:
                reason = self._read_loop()
            finally:
                if self._read_fd >= 0:
                    os.close(self._read_fd)
                    self._read_fd = -1
        except OSError as e:
            reason = f"connection lost: {e.strerror or e}"
        except Exception:
            log.exception("stomp %s: the connection failed", self.peer)
            self._error("internal error")
            reason = "internal error"
        finally:
            self.close(reason)

    def _read_loop(self) -> str:
        # poll, not a selector: it holds no file descriptor of its own per connection.
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        poller.register(self._outbox.wake_fd, select.POLLIN)
        reading = True
        sock_fd = self._sock.fileno()
        connect_deadline = time.monotonic() + self._settings.connect_timeout
        while not self._closed:
            now = time.monotonic()
            expired = self._expired(now, connect_deadline)
            if expired is not None:
                return expired
            if not self._send_receipts():
                return "a send failed"
            failed = self._take_send_failure()
            if failed is not None:
                # The receipts of the frames before it first, as far as they can go.
                if self._wait_for_receipts(self._settings.write_timeout):
                    self._error(f"a send failed: {failed[0]}", receipt=failed[1])
                return "a send failed"
            # Too many receipts pending: the client waits (TCP holds its frames) until the oldest is durable.
            limit = self._settings.max_pending_receipts
            room = self._pending_receipts() < limit
            if room != reading:
                poller.modify(self._sock, select.POLLIN if room else 0)
                reading = room
                # Not reading: whoever writes receipts below the limit wakes the reader.
                self._outbox.wake_below(0 if room else limit)
            if not reading:
                # The server is not reading: the client's silence and slowness are not its own.
                self._last_read = now
                if self._frame_started is not None:
                    self._frame_started = now
            # At half the interval: a late wake-up on a busy machine still keeps within it.
            if self._send_interval and self._quiet_for(now) >= self._send_interval / 2:
                self._heart_beat()
            try:
                read = self._read_frames(poller, sock_fd, reading, limit)
            except FrameError as e:
                for frame in e.frames:
                    if not self._handle(frame):
                        return "closed after an error"
                if self._wait_for_receipts(self._settings.write_timeout):
                    self._error(str(e))
                return "malformed frame"
            if read is None:
                continue
            frames, lane, ack_lane, closed = read
            if closed:
                return "closed by the client"
            lane_took = self._lanes_took()
            if lane is not None:
                failed = lane.take_failure()
                if failed is not None:  # none of the frames after the one that failed is handled
                    # Those of the frames before it first (unless one of theirs failed too: its ERROR ends it).
                    if self._wait_for_receipts(self._settings.write_timeout):
                        self._error(f"a send failed: {failed[0]}", receipt=failed[1])
                    return "a send failed"
            acknowledgement_failed = ack_lane.take_failure() if ack_lane is not None else None
            if acknowledgement_failed is not None:  # none of the frames after it is handled
                if self._wait_for_receipts(self._settings.write_timeout):
                    self._error(f"{type(acknowledgement_failed).__name__}: {acknowledgement_failed}")
                return "an acknowledgement failed"
            index = 0
            while index < len(frames):
                frame = frames[index]
                if frame.command == Command.ACK:
                    acks = self._handle_plain_acks(frames, index)
                    if acks < 0:
                        return "closed after an error"
                    if acks:
                        index += acks
                        continue
                elif frame.command == Command.SEND and not self._room_for_a_receipt():
                    return "a send failed"
                if not self._handle(frame):
                    return "disconnected" if frame.command == Command.DISCONNECT else "closed after an error"
                index += 1
            if not self._hold_incomplete_frame(bool(frames) or lane_took):
                return "too many bytes of incomplete frames in the server"
        return "closed by the server"

    def _read_frames(
        self, poller: select.poll, sock_fd: int, reading: bool, limit: int
    ) -> tuple[list[Frame], NativeSendLane | None, NativeAckLane | None, bool] | None:
        """Waits up to a tick for input and reads it: ``(frames to handle,
        the lanes that took the others, whether the client closed)``, or
        None if there is nothing to handle (a wake-up, a tick with no
        input, part of a TLS record). While the lanes may take what comes,
        the socket is read natively, many frames and reads per call."""
        if reading and self._read_fd >= 0 and not self._streaming:
            usable = self._lane_for_reading()
            ack_lane = self._acks if self._by_serial else None
            # The lane goes along even when it takes no destination now: its failure,
            # kept from an earlier send, stops the ACK lane too.
            lane = self._lane
            if usable is not None or ack_lane is not None:
                natively = self._parser.read_natively(
                    self._read_fd,
                    self._outbox,
                    lane,
                    ack_lane,
                    receipt_limit=limit,
                    wait=self._tick(),
                    busy=_NATIVE_BUSY,
                    read_size=_READ_SIZE,
                    hold=_NATIVE_HOLD,
                )
                if natively is not None:
                    if natively.reads:
                        self._last_read = time.monotonic()
                        self._frames.native_reads += natively.reads
                    if natively.stop == "woken":
                        self._drain_wake()
                    self._streaming = natively.stop == "full"
                    return natively.frames, lane, ack_lane, natively.stop == "closed"
        if reading and self._transport.buffered():
            events = [(sock_fd, select.POLLIN)]  # bytes that came with the TLS handshake
        else:
            events = poller.poll(self._tick() * 1000)
        if not any(fd == sock_fd for fd, _ in events):
            self._drain_wake()
            return None
        if len(events) > 1:
            self._drain_wake()
        data = self._transport.recv(_READ_SIZE)
        if data is None:
            return [], None, None, True
        if not data:
            return None  # part of a TLS record
        self._streaming = len(data) >= _READ_SIZE
        self._last_read = time.monotonic()
        lane = self._lane_for_reading()
        ack_lane = self._acks if self._by_serial else None
        return self._parser.feed(data, lane, ack_lane), lane, ack_lane, False

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._outbox.wake_fd, 4096):
                pass

    def _pending_receipts(self) -> int:
        return self._outbox.pending()

    def _send_receipts(self) -> bool:
        """Sends the RECEIPTs at the head of the queue that are done, in order;
        False once a SEND failed (an ERROR frame with its receipt-id was sent
        instead: the connection ends)."""
        outbox = self._outbox
        if not outbox.has_work():
            return True
        # Those done go out together in one write: a client pipelining its sends
        # gets the receipts of one group commit in one segment. Taken and written
        # under the write lock, so that they go out in order.
        with outbox:
            frames, _, failed = outbox.take_done()  # the outbox counts the RECEIPTs
            self._send_locked(frames, [])
        if failed is not None:
            receipt_id, why = failed
            self._error(f"a send failed: {why}", receipt=receipt_id)
            return False
        return True

    def _room_for_a_receipt(self) -> bool:
        """Waits until fewer than ``max_pending_receipts`` receipts are pending,
        sending those that are done; False if a send failed (an ERROR was sent)."""
        outbox = self._outbox
        if not outbox.pending():
            return True  # nothing pending (the usual case): room (a tail is the loop's to send)
        limit = self._settings.max_pending_receipts
        while not self._closed:
            outbox.wait_for_room(limit, self._tick())
            if not self._send_receipts():
                return False
            if outbox.pending() < limit:
                return True
            now = time.monotonic()
            self._last_read = now  # waiting on the store, not on the client
            # The client hears from us while we wait on the store, as while we wait on it.
            if self._send_interval and self._quiet_for(now) >= self._send_interval / 2:
                self._heart_beat()
        return True

    def _wait_for_receipts(self, timeout: float) -> bool:
        """Waits until every pending receipt is done and sends them; False if a send failed."""
        self._outbox.wait_all_done(timeout)
        return self._send_receipts()

    def _expired(self, now: float, connect_deadline: float) -> str | None:
        """Why the connection ends now for want of input (after an ERROR frame
        where one helps), or None."""
        settings = self._settings
        if not self._connected and now >= connect_deadline:
            self._stats.timed_out()
            self._error(f"no CONNECT frame within {settings.connect_timeout:g} s")
            return "no CONNECT in time"
        if self._frame_started is not None and now - self._frame_started > settings.frame_timeout:
            self._stats.timed_out()
            self._error(f"a frame was not completed within {settings.frame_timeout:g} s")
            return "a frame not completed in time"
        if self._receive_interval and now - self._last_read > 2 * self._receive_interval:
            self._stats.heartbeat_timeout()
            return f"no heart-beat from the client for {2 * self._receive_interval:g} s"
        if settings.idle_timeout and now - self._last_read > settings.idle_timeout:
            self._stats.timed_out()
            self._error(f"nothing received for {settings.idle_timeout:g} s")
            return "idle"
        return None

    def _hold_incomplete_frame(self, completed_any: bool) -> bool:
        """Charges what the parser holds now to the server's budget and notes
        when the incomplete frame began; False if the budget is exhausted
        (an ERROR frame was sent)."""
        held = self._parser.buffered
        if not self._buffers.charge(self._charged, held):
            self._error("the server holds too much of incomplete frames from its clients; try again later")
            return False
        self._charged = held
        if held == 0:
            self._frame_started = None
        elif completed_any or self._frame_started is None:
            self._frame_started = self._last_read
        return True

    def _tick(self) -> float:
        return heartbeat.tick(self._send_interval, self._receive_interval)

    def _take_send_failure(self) -> tuple[BaseException, str | None] | None:
        """The first send that failed, once, and the receipt id of its frame."""
        with self._pending:
            failure, self._send_failure = self._send_failure, None
        if failure is not None:
            return failure, None
        return self._lane.take_failure() if self._lane is not None else None

    def _lane_for_reading(self) -> NativeSendLane | None:
        """The lane, its destinations brought up to date (a destination
        paused, deleted or flow-controlled since goes the Python path until
        it is not), or None if it takes none."""
        lane, producer = self._lane, self._producer
        if lane is None or producer is None or not self._lane_destinations:
            return None
        usable = False
        for text, (destination, allowed) in self._lane_destinations.items():
            try:
                native = producer.lane_destination(destination)
            except JmsStoreError:
                native = None  # deleted: the Python path says so
            if native is not allowed:
                if native is None:
                    lane.forget(text)
                else:
                    lane.allow(text, native)
                self._lane_destinations[text] = (destination, native)
            usable = usable or native is not None
        return lane if usable else None

    def _lanes_took(self) -> bool:
        """Whether the lanes took SEND or ACK frames since it was last asked
        (they count them themselves)."""
        parser = self._parser
        took = parser.lane_sends != self._lane_sends_seen or parser.lane_acks != self._lane_acks_seen
        self._lane_sends_seen, self._lane_acks_seen = parser.lane_sends, parser.lane_acks
        return took

    def _lane_may_take(self, text: str, destination: Destination) -> None:
        """A SEND to ``destination`` (named ``text``) went the Python path
        and was sent: later ones may take the lane."""
        known = self._lane_destinations
        if self._lane is not None and text not in known and len(known) < _LANE_DESTINATIONS:
            known[text] = (destination, None)

    # ------------------------------------------------------------ frames

    def _handle(self, frame: Frame) -> bool:
        """Handles one frame; False: the connection ends (an ERROR was sent, or DISCONNECT)."""
        self._frames.frame_in(frame.command)
        headers = frame.header_map()
        receipt_id = headers.get("receipt")
        queued = receipt_id is not None and frame.command not in (
            Command.CONNECT,
            Command.STOMP,
            Command.DISCONNECT,
        )
        receipt: _Receipt | None = None
        with self._frame_lock:
            if self._closed:
                return False
            if queued and receipt_id is not None:
                # Queued under the frame lock: a close waiting for the receipts
                # waits only for those of frames handled (or being completed).
                receipt = _Receipt(self._outbox.push(receipt_id, False, False))
            self._current_receipt = receipt
            try:
                if not self._connected and frame.command not in (Command.CONNECT, Command.STOMP):
                    raise ProtocolError(f"the first frame must be CONNECT, not {frame.command}")
                more = _HANDLERS[frame.command](self, frame, headers)
            except (ProtocolError, FrameError, JmsStoreError, ValueError, TypeError, OverflowError) as e:
                # ValueError, TypeError (UnicodeError among them): what the frame
                # carried, refused deeper than the mapping checks; the client's, not a bug.
                if not isinstance(e, JmsStoreError):
                    log.debug("stomp %s (%s): %s frame refused", self.peer, self.session, frame.command, exc_info=True)
                self._discard(receipt)  # the ERROR frame carries it
                # The receipts of the frames before it go first, as far as they can
                # (a send of theirs that failed has its own ERROR frame, and ends it).
                if self._wait_for_receipts(self._settings.write_timeout):
                    message = str(e) if isinstance(e, (ProtocolError, FrameError)) else f"{type(e).__name__}: {e}"
                    self._error(message, frame)
                return False
            except OSError:
                self._discard(receipt)
                raise  # the connection broke: the reader closes it
            except Exception:
                # A bug: logged with its traceback, and still an ERROR with the frame's receipt-id.
                log.exception("stomp %s (%s): handling a %s frame failed", self.peer, self.session, frame.command)
                self._discard(receipt)
                if self._wait_for_receipts(self._settings.write_timeout):
                    self._error("internal error", frame)
                return False
            except BaseException:
                self._discard(receipt)
                raise
            finally:
                self._current_receipt = None
            if receipt is not None:
                if not more:
                    self._discard(receipt)
                    return False
                self._outbox.ready(receipt.ticket, not receipt.asynchronous)
        return self._send_receipts() if receipt is not None else more

    def _discard(self, receipt: _Receipt | None) -> None:
        """The frame of ``receipt`` ends the connection: its receipt leaves the queue."""
        if receipt is not None:
            self._outbox.discard(receipt.ticket)

    def _on_connect(self, frame: Frame, headers: dict[str, str]) -> bool:
        if self._connected:
            raise ProtocolError("already connected")
        versions = [v.strip() for v in headers.get("accept-version", "1.0").split(",")]
        if "1.2" not in versions:
            self._error(
                f"this server speaks STOMP 1.2 only; the client accepts {', '.join(versions)}",
                frame,
                [("version", "1.2")],
            )
            return False
        security = self._server.security
        if security.required:
            user = security.authenticate(headers.get("login"), headers.get("passcode"))
            if user is None:
                self._stats.login_failed()
                # The same answer for an unknown login and a wrong passcode.
                self._error("login failed: unknown login or wrong passcode", frame)
                log.info("stomp %s (%s): login failed for %r", self.peer, self.session, headers.get("login", "")[:60])
                return False
            self.user = user
        client_send, client_receive = _heart_beat(headers.get("heart-beat", "0,0"))
        ours_send, ours_receive = self._settings.heart_beat
        send_ms = heartbeat.negotiated(ours_send, client_receive)
        receive_ms = heartbeat.negotiated(ours_receive, client_send)
        client_id = headers.get("client-id")
        if client_id is not None:
            try:
                check_name("client id", client_id)
            except InvalidArgumentError as e:
                raise ProtocolError(str(e)) from None
        self._connection_id = self._port.register_connection(self, client_id)
        self.client_id = client_id
        self._connected = True
        self._producer = self._port.open_producer(None, self._server.send_options, self._connection_id, client_id)
        if self._settings.native_sends:
            self._lane = self._producer.send_lane()
            if self._lane is not None:  # receipted SENDs too, their receipts queued with the others
                self._lane.take_receipts(self._outbox, self._settings.max_pending_receipts)
                self._acks = self._lane.ack_lane()
                self._frames.count_lanes(self._lane, self._acks)
        self._send_interval = send_ms / 1000
        self._receive_interval = receive_ms / 1000
        self._write(
            Frame(
                Command.CONNECTED,
                [
                    ("version", "1.2"),
                    ("server", f"jmsstore/{__version__}"),
                    ("heart-beat", f"{send_ms},{receive_ms}"),
                    ("session", self.session),
                    (EXTENSIONS_HEADER, RECALL_EXTENSION),
                    (FRAME_LIMITS_HEADER, frame_limits_text(self._server.frame_limits)),
                ],
            )
        )
        log.info(
            "stomp %s (%s): connected%s%s, heart-beat %d,%d ms",
            self.peer,
            self.session,
            f" as user {self.user.name}" if self.user is not None else "",
            f" as client-id {client_id}" if client_id else "",
            send_ms,
            receive_ms,
        )
        return True

    _on_stomp = _on_connect

    def _user_name(self) -> str:
        return repr(self.user.name) if self.user is not None else "(anonymous)"

    def _receivable(self, headers: dict[str, str]) -> Destination:
        """The destination a SUBSCRIBE names, if the user may receive from it
        (created on first use; a ``/temp-queue/NAME`` is this connection's own)."""
        destination = parse_destination(headers.get("destination"), temporary=True)
        name = destination_name(destination)
        if not self._server.security.may_receive(self.user, name):
            raise ProtocolError(f"user {self._user_name()} may not receive from {name}")
        if isinstance(destination, TemporaryQueue):
            if not str(headers.get("destination")).startswith(REMOTE_TEMP_QUEUE):
                return self._temporary_queue(destination.name)
            own = self._own_temporary(destination.name)
            if own is None:
                raise ProtocolError(
                    f"{headers.get('destination')} is not a temporary queue of this connection: only its own may "
                    "receive from it"
                )
            return own
        self._check_not_temporary_name(destination)
        self._server.ensure_destination(destination)
        return destination

    @staticmethod
    def _check_not_temporary_name(destination: Destination) -> None:
        """Refuses ``/queue/NAME`` where NAME is a temporary queue's server-wide
        name: it is reached as ``/temp-queue/NAME`` (its owner's) or
        ``/remote-temp-queue/NAME``, and made only by the broker."""
        if type(destination) is Queue and _TEMPORARY_NAME.fullmatch(destination.name):
            raise ProtocolError(
                f"{destination_name(destination)} is in the temporary queues' namespace (TEMP.SERVER.BOOT.N): "
                f"a client may not make or use it as a queue; name yours /temp-queue/NAME, another's "
                f"{REMOTE_TEMP_QUEUE}NAME"
            )

    def _own_temporary(self, server_name: str) -> TemporaryQueue | None:
        """This connection's temporary queue whose server-wide name is ``server_name``."""
        return next((q for q in self._temporary.values() if q.name == server_name), None)

    def _temporary_queue(self, name: str) -> TemporaryQueue:
        """This connection's temporary queue the client calls ``name``,
        created on first use and deleted when the connection closes, as
        ActiveMQ maps ``/temp-queue/NAME``."""
        queue = self._temporary.get(name)
        if queue is None:
            limit = self._settings.max_subscriptions
            if len(self._temporary) >= limit:
                raise ProtocolError(f"a connection may have at most {limit} temporary queues (max_subscriptions)")
            queue = self._new_temporary_queue()
            self._temporary[name] = queue
        return queue

    def _new_temporary_queue(self) -> TemporaryQueue:
        # A queue of the broker's next temporary name may exist already, made by a client
        # naming it /queue/TEMP... (or left from an older version): each try takes the next
        # name, and there are only so many such queues.
        attempts = self._settings.max_auto_created_destinations + 1
        while True:
            try:
                return self._port.create_temporary_queue(self._connection_id)
            except InvalidArgumentError as e:
                attempts -= 1
                if "exists already" not in str(e) or attempts <= 0:
                    raise
                log.info("stomp %s (%s): a temporary queue's name is taken (%s)", self.peer, self.session, e)

    def _resolve_temporary(self, destination: TemporaryQueue, text: str | None) -> TemporaryQueue:
        """Where a SEND (or its ``reply-to``) naming a temporary queue goes:
        ``/temp-queue/NAME`` is this connection's own (made if need be);
        ``/remote-temp-queue/NAME`` the temporary queue of that server-wide
        name, any connection's, which must still exist."""
        if not str(text).startswith(REMOTE_TEMP_QUEUE):
            return self._temporary_queue(destination.name)
        own = self._own_temporary(destination.name)
        if own is not None:
            return own
        try:
            self._port.check_destination(destination)
        except InvalidDestinationError:
            raise ProtocolError(
                f"temporary queue {text} does not exist (any more: it goes when its connection closes)"
            ) from None
        return destination

    def _on_send(self, frame: Frame, headers: dict[str, str]) -> bool:
        outgoing = outgoing_message(headers, frame.body, time.time_ns() // 1_000_000)
        name = destination_name(outgoing.destination)
        if not self._server.security.may_send(self.user, name):
            raise ProtocolError(f"user {self._user_name()} may not send to {name}")
        if isinstance(outgoing.message.reply_to, TemporaryQueue):
            outgoing.message.reply_to = self._resolve_temporary(outgoing.message.reply_to, headers.get("reply-to"))
        if isinstance(outgoing.destination, TemporaryQueue):
            outgoing.destination = self._resolve_temporary(outgoing.destination, headers.get("destination"))
        else:
            self._check_not_temporary_name(outgoing.destination)
            self._server.ensure_destination(outgoing.destination)
        producer = self._producer
        assert producer is not None
        args = (outgoing.message, outgoing.destination, outgoing.mode, outgoing.priority, outgoing.ttl, 0)
        # The client's absolute expires, as it gave it (a time to live would be read against a second clock).
        expiration = outgoing.expiration
        transaction = headers.get("transaction")
        if transaction is not None:
            staged = producer.stage(*args, expiration=expiration)
            if staged is not None:
                self._transaction(transaction).staged.append(staged)
            if self._current_receipt is not None and outgoing.message.message_id is not None:
                self._outbox.set_message_id(self._current_receipt.ticket, outgoing.message.message_id)
        elif self._current_receipt is not None:
            receipt = self._current_receipt
            receipt.asynchronous = True
            outbox, ticket = self._outbox, receipt.ticket
            try:
                accepted = producer.send_async(
                    *args,
                    None,
                    lambda _handle, error: outbox.complete(ticket, None if error is None else str(error)),
                    expiration=expiration,
                )
            except BaseException:
                receipt.asynchronous = False
                raise
            # Stamped by now; the receipt can go out only once the frame is handled (ready).
            if outgoing.message.message_id is not None:
                outbox.set_message_id(ticket, outgoing.message.message_id)
            if not accepted:
                outbox.complete(ticket)  # dropped (non-persistent, over the broker-wide limits)
        else:
            with self._pending:
                self._pending_sends += 1
            try:
                accepted = producer.send_async(*args, None, self._sent, expiration=expiration)
            except BaseException:
                self._sent(None, None)
                raise
            if not accepted:
                self._sent(None, None)  # dropped (non-persistent, over the broker-wide limits)
        if transaction is None and not isinstance(outgoing.destination, TemporaryQueue):
            self._lane_may_take(headers["destination"], outgoing.destination)
        return True

    def _sent(self, _handle: int | None, error: BaseException | None) -> None:
        """A send without a receipt completed (on the broker's callback thread)."""
        with self._pending:
            self._pending_sends -= 1
            if error is not None and self._send_failure is None:
                self._send_failure = error
                self._outbox.wake()  # a reader reading natively looks at it now
            self._pending.notify_all()

    def _wait_for_sends(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._pending:
            self._pending.wait_for(lambda: self._pending_sends <= 0, timeout)
        if self._lane is not None:
            self._lane.wait_idle(max(0.0, deadline - time.monotonic()))

    def _on_subscribe(self, frame: Frame, headers: dict[str, str]) -> bool:
        subscription_id = headers.get("id")
        if subscription_id is None:
            raise ProtocolError("SUBSCRIBE needs an id header")
        if subscription_id in self._subscriptions:
            raise ProtocolError(f"subscription id {subscription_id!r} is in use on this connection")
        if len(self._subscriptions) >= self._settings.max_subscriptions:
            raise ProtocolError(f"a connection may have at most {self._settings.max_subscriptions} subscriptions")
        ack_mode = headers.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise ProtocolError(f"ack must be auto, client or client-individual, not {ack_mode[:40]!r}")
        prefetch = self._settings.default_prefetch
        if "activemq.prefetchSize" in headers:
            text = headers["activemq.prefetchSize"]
            limit = self._settings.max_prefetch
            if not (text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= limit):
                raise ProtocolError(f"activemq.prefetchSize must be within 1..{limit}, not {text[:40]!r}")
            prefetch = int(text)
        selector = Selector(headers.get("selector"))
        if selector.text:
            selector.native()  # an invalid selector is refused here
        destination = self._receivable(headers)
        name = headers.get("activemq.subscriptionName")
        if isinstance(destination, Topic) and name is not None:
            if self.client_id is None:
                raise ProtocolError("a durable subscription (activemq.subscriptionName) needs a client-id on CONNECT")
            try:
                check_name("subscription", name)
            except InvalidArgumentError as e:
                raise ProtocolError(str(e)) from None
            # Opening it may replace one of this name on another topic, with its messages.
            self._check_durable(name, "open")
        slots = self._server.subscription_slots
        if not slots.take():
            raise ProtocolError(f"the server has its most subscriptions open ({slots.limit}); try again later")
        try:
            no_local = headers.get("activemq.noLocal", "false").lower() == "true"
            self._open_subscription(subscription_id, ack_mode, prefetch, selector, destination, name, no_local)
        except BaseException:
            slots.give_back()
            raise
        return True

    def _open_subscription(
        self,
        subscription_id: str,
        ack_mode: str,
        prefetch: int,
        selector: Selector,
        destination: Destination,
        name: str | None,
        no_local: bool,
    ) -> None:
        if isinstance(destination, Topic):
            consumer = self._port.open_subscription(
                destination, name, self.client_id, selector, name is not None, False, no_local, self._connection_id
            )
        else:
            assert isinstance(destination, Queue)
            consumer = self._port.open_queue_consumer(destination, selector, self._connection_id)
        serial = next(self._subscription_serials)
        subscription = Subscription(
            serial,
            subscription_id,
            ack_mode,
            prefetch,
            self._port,
            consumer,
            self._write_messages,
            self.fail,
            name if isinstance(destination, Topic) else None,
            # The owner's MESSAGE frames name its temporary queue as it did.
            next((f"/temp-queue/{n}" for n, q in self._temporary.items() if q is destination), None),
            outbox=self._outbox if self._native_dispatch else None,
            write_timeout=self._settings.write_timeout,
        )
        try:
            subscription.start()
        except RuntimeError:  # no thread for it
            subscription.close()
            raise ProtocolError("the server cannot start another subscription now") from None
        self._subscriptions[subscription_id] = subscription
        self._by_serial[serial] = subscription
        if self._acks is not None and ack_mode != "auto":
            self._acks.add(serial, *subscription.acknowledgeable)

    def _on_unsubscribe(self, frame: Frame, headers: dict[str, str]) -> bool:
        subscription_id = headers.get("id")
        if subscription_id is None:
            raise ProtocolError("UNSUBSCRIBE needs an id header")
        if subscription_id not in self._subscriptions:
            raise ProtocolError(f"no subscription {subscription_id!r} on this connection")
        name = headers.get("activemq.subscriptionName")
        if name is not None:
            self._check_durable(name, "remove")  # before anything changes
        subscription = self._subscriptions.pop(subscription_id)
        self._by_serial.pop(subscription.serial, None)
        if self._acks is not None:
            self._acks.remove(subscription.serial)
        # jmsstore's client says when everything still unacknowledged is unseen
        # by its application (still in its buffer or on the wire): those go back unflagged.
        subscription.close(redelivered=headers.get(UNSEEN_HEADER) != "true")
        self._server.subscription_slots.give_back()
        # ActiveMQ: UNSUBSCRIBE naming the durable subscription deletes it; without, it only stops.
        if name is not None:
            self._port.unsubscribe(self.client_id, name)
        return True

    def _check_durable(self, name: str, action: str) -> None:
        """Only a user who may receive from a durable subscription's topic may
        open, replace or remove it (a client id is anyone's to give)."""
        security = self._server.security
        if not security.required:
            return
        topic = self._port.durable_topic(self.client_id, name)
        if topic is None:
            return
        if not security.may_receive(self.user, destination_name(topic)):
            # The topic is not named: it is not this user's to learn.
            raise ProtocolError(
                f"user {self._user_name()} may not receive from the topic of durable subscription {name!r} "
                f"(client id {self.client_id!r}), so it may not {action} it"
            )

    def _handle_plain_acks(self, frames: list[Frame], start: int) -> int:
        """Handles the run of ACK frames from ``start`` that have neither a
        receipt nor a transaction (a client acknowledging message by
        message, as most do) as their handler would one by one, with one
        acknowledgement per stretch of frames for one subscription; how
        many it handled (0: fewer than two such, for the handler), or -1
        when one was refused (an ERROR frame was sent, as the handler would,
        after those before it took effect). A stretch whose
        acknowledgement fails is refused at its first frame, and its
        messages are back, flagged redelivered."""
        end = start
        while end < len(frames) and frames[end].command == Command.ACK and _plain_ack(frames[end]):
            end += 1
        if end - start < 2 or not self._connected:
            return 0
        # Counted before the lock, as the handler counts a frame: if the
        # connection closes meanwhile, its counts are retired with this one in.
        self._frames.frame_in(Command.ACK)
        counted = 1  # frames of the run counted so far
        with self._frame_lock:
            if self._closed:
                return -1
            stretch: _AckStretch | None = None
            refused: tuple[Exception, Frame] | None = None
            handled = 0  # frames of the run handled (acknowledged, or refused)
            stretch_failed = False
            for frame in frames[start:end]:
                try:
                    subscription, ack = self._subscription_of(frame.header("id"))
                    # The stretch before ends first: if it fails, this frame is not handled.
                    if stretch is not None and stretch.subscription is not subscription:
                        failure = self._acknowledge_stretch(stretch)
                        if failure is not None:
                            handled, refused, stretch, stretch_failed = handled + 1, failure, None, True
                            break
                        handled, stretch = handled + stretch.frames, None
                    deliveries = subscription.take(ack)
                except ProtocolError as e:
                    refused = (e, frame)
                    break
                if stretch is None:
                    stretch = _AckStretch(subscription, frame)
                stretch.deliveries.extend(deliveries)
                stretch.frames += 1
            if stretch is not None:  # the last stretch, or the one before the refused frame
                failure = self._acknowledge_stretch(stretch)
                if failure is not None:
                    handled, refused, stretch_failed = handled + 1, failure, True  # it came first
                else:
                    handled += stretch.frames
            if refused is not None and not stretch_failed:
                handled += 1  # the frame whose id was refused
            if handled > counted:
                self._frames.frame_in(Command.ACK, handled - counted)
            if refused is None:
                return end - start
            error, frame = refused
            if self._wait_for_receipts(self._settings.write_timeout):
                message = str(error) if isinstance(error, ProtocolError) else f"{type(error).__name__}: {error}"
                self._error(message, frame)
            return -1

    def _acknowledge_stretch(self, stretch: _AckStretch) -> tuple[Exception, Frame] | None:
        """Acknowledges what a stretch of ACK frames settled; if that fails,
        the error with the stretch's first frame, where the handler would
        have stopped (its messages are back, flagged redelivered)."""
        try:
            stretch.subscription.acknowledge(stretch.deliveries, durable=False)
        except JmsStoreError as e:
            return (e, stretch.first)
        return None

    def _settled(self, headers: dict[str, str]) -> tuple[Subscription, list[Delivery]]:
        subscription, ack = self._subscription_of(headers.get("id"))
        return subscription, subscription.take(ack)

    def _subscription_of(self, ack: str | None) -> tuple[Subscription, str]:
        """The subscription whose MESSAGE frame had ack id ``ack``, and the id."""
        if ack is None:
            raise ProtocolError("ACK and NACK need an id header (the ack header of the MESSAGE)")
        serial, _, _ = ack.partition(".")
        # ASCII digits: str.isdigit also takes "²", which int() does not.
        known = serial.isascii() and serial.isdigit() and len(serial) <= 18
        subscription = self._by_serial.get(int(serial)) if known else None
        if subscription is None:
            raise ProtocolError(f"no message awaits acknowledgement with id {ack[:60]!r}")
        return subscription, ack

    def _on_ack(self, frame: Frame, headers: dict[str, str]) -> bool:
        # As ActiveMQ's KahaDB: an ACK is forced to disk before the server goes
        # on only when the client asks for a receipt; without one the message
        # is gone at once and its delete joins the subscription's next batch.
        transaction = headers.get("transaction")
        tx = self._transaction(transaction) if transaction is not None else None
        subscription, deliveries = self._settled(headers)
        if tx is not None:
            tx.acks.extend(deliveries)
            return True
        subscription.acknowledge(deliveries, durable="receipt" in headers)
        return True

    def _on_nack(self, frame: Frame, headers: dict[str, str]) -> bool:
        transaction = headers.get("transaction")
        tx = self._transaction(transaction) if transaction is not None else None
        subscription, deliveries = self._settled(headers)
        recall = headers.get(RECALL_HEADER) == "true"
        if tx is not None:
            if recall:
                raise ProtocolError(f"{RECALL_HEADER} is for a NACK outside a transaction")
            tx.nacks.extend(deliveries)
        else:
            # jmsstore's clients say which messages their application never had.
            self._port.release(deliveries, redelivered=headers.get(UNSEEN_HEADER) != "true")
            if recall:
                subscription.recall()
        return True

    def _transaction(self, name: str) -> _Transaction:
        tx = self._transactions.get(name)
        if tx is None:
            raise ProtocolError(f"no transaction {name[:60]!r} has begun on this connection")
        return tx

    def _transaction_name(self, frame: Frame, headers: dict[str, str]) -> str:
        name = headers.get("transaction")
        if name is None:
            raise ProtocolError(f"{frame.command} needs a transaction header")
        return name

    def _on_begin(self, frame: Frame, headers: dict[str, str]) -> bool:
        name = self._transaction_name(frame, headers)
        if name in self._transactions:
            raise ProtocolError(f"transaction {name[:60]!r} has already begun")
        if len(self._transactions) >= self._settings.max_transactions:
            raise ProtocolError(f"a connection may have at most {self._settings.max_transactions} open transactions")
        self._transactions[name] = _Transaction()
        return True

    def _on_commit(self, frame: Frame, headers: dict[str, str]) -> bool:
        name = self._transaction_name(frame, headers)
        tx = self._transaction(name)
        del self._transactions[name]
        try:
            self._port.commit(tx.staged, tx.acks)  # one store transaction, durable on return
        except BaseException:
            self._port.release(tx.acks + tx.nacks, redelivered=True)
            raise
        if tx.nacks:
            self._port.release(tx.nacks, redelivered=True)
        return True

    def _on_abort(self, frame: Frame, headers: dict[str, str]) -> bool:
        name = self._transaction_name(frame, headers)
        tx = self._transaction(name)
        del self._transactions[name]
        self._abort(tx)
        return True

    def _abort(self, tx: _Transaction) -> None:
        if tx.staged:
            self._port.unstage(tx.staged)
        if tx.acks or tx.nacks:
            self._port.release(tx.acks + tx.nacks, redelivered=True)

    def _on_disconnect(self, frame: Frame, headers: dict[str, str]) -> bool:
        # The receipt says everything before it is done: sends included.
        self._wait_for_sends(self._settings.write_timeout)
        failed = self._take_send_failure()
        if failed is not None:
            raise ProtocolError(f"a send failed: {failed[0]}")
        if not self._wait_for_receipts(self._settings.write_timeout):
            return False  # a send failed: its ERROR frame went out instead
        # And its unacknowledged messages are back, and its client id free, before the
        # receipt says so: a client reconnecting at once with the same id is not refused.
        self._release_everything()
        receipt_id = headers.get("receipt")
        if receipt_id is not None:
            self._write(Frame(Command.RECEIPT, [("receipt-id", receipt_id)]))
        return False

    # ------------------------------------------------------------ closing

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, reason: str = "closed by the server") -> None:
        """Closes the connection: waits for the frame being handled, aborts
        open transactions, returns unacknowledged messages (flagged
        redelivered), closes the socket. Idempotent; safe from any thread
        (the broker's close calls it too)."""
        with self._close_lock:
            if self._closed:
                return
            # The frame being handled finishes first (bounded: a send blocked on a full quota waits).
            locked = self._frame_lock.acquire(timeout=self._settings.write_timeout)
            try:
                if self._lane is not None:
                    self._lane.close()  # a send it is making finishes; none starts
                with self._charge_lock:
                    self._closed = True
                    self._buffers.charge(self._charged, 0)
                    self._charged = 0
                # The socket first: a dispatcher blocked writing to a client that does not read is freed.
                self._break()
                self._release_everything()
            finally:
                if locked:
                    self._frame_lock.release()
            # Under the write lock: no receipt is being written as it closes (and
            # none is written after: the outbox's descriptor is its own duplicate).
            written = self._outbox.acquire(True, self._settings.write_timeout)
            try:
                self._outbox.close()
                self._transport.close()
            finally:
                if written:
                    self._outbox.release()
        self._server.forget(self)
        log.info("stomp %s (%s): closed (%s)", self.peer, self.session, reason)

    def _close_subscriptions(self) -> None:
        subscriptions = list(self._subscriptions.values())
        self._subscriptions.clear()
        self._by_serial.clear()
        for subscription in subscriptions:
            if self._acks is not None:
                self._acks.remove(subscription.serial)
            subscription.close()
            self._server.subscription_slots.give_back()

    def _release_everything(self) -> None:
        """Gives back what the connection holds in the broker, once (at
        DISCONNECT, before its receipt, or at close)."""
        if self._released:
            return
        self._released = True
        try:
            self._close_subscriptions()
            for tx in self._transactions.values():
                self._abort(tx)
            self._transactions.clear()
            self._wait_for_sends(self._settings.write_timeout)
            self._outbox.wait_all_done(self._settings.write_timeout)
            if self._producer is not None:
                self._producer.close()
            temporary, self._temporary = list(self._temporary.values()), {}
            for queue in temporary:  # its temporary queues go with it, and their messages
                self._port.delete_temporary_queue(queue, True)
        except JmsStoreError as e:
            log.warning("stomp %s: closing: %s", self.peer, e)
        finally:
            if self._connected:
                self._port.release_connection(self, self.client_id)

    def describe(self) -> dict[str, Any]:
        return {"peer": self.peer, "session": self.session, "client_id": self.client_id}


@dataclass(slots=True)
class _AckStretch:
    """Consecutive plain ACK frames for one subscription: what they settled."""

    subscription: Subscription
    first: Frame
    deliveries: list[Delivery] = field(default_factory=list)
    frames: int = 0


def _plain_ack(frame: Frame) -> bool:
    """An ACK without a receipt or a transaction."""
    return all(name != "receipt" and name != "transaction" for name, _ in frame.headers)


# The handler of each command a client may send (the parser lets no other through).
_HANDLERS: dict[str, Callable[[StompConnection, Frame, dict[str, str]], bool]] = {
    command: getattr(StompConnection, f"_on_{command.lower()}") for command in CLIENT_COMMANDS
}
