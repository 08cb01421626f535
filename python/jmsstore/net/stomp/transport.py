"""The byte stream under a STOMP connection: a plain TCP socket, or TLS
over it (the standard library's :mod:`ssl`).

TLS runs over memory buffers (:class:`ssl.SSLObject`) rather than an
:class:`ssl.SSLSocket`: a connection's reader thread and the threads that
write to it (its subscriptions' dispatchers) use the TLS state at the same
time, which OpenSSL does not allow on one object, so every use of it is
under one lock, and the raw socket is read and written outside it.
Encrypted records go out in the order they were made: whoever takes bytes
from the outgoing buffer sends them before anyone else takes more.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time

__all__ = ["PlainTransport", "TlsTransport", "Transport", "client_tls_context", "server_tls_context"]


def server_tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server-side TLS context with the standard library's defaults
    (TLS 1.2 or later) and the given certificate chain and private key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


def client_tls_context(cafile: str | None = None) -> ssl.SSLContext:
    """A client-side TLS context with the standard library's defaults (TLS
    1.2 or later, the server's certificate checked against its host name),
    trusting the certificates in ``cafile`` (PEM) or, without one, the
    system's certificate authorities."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class PlainTransport:
    """A TCP socket as it is.

    A socket with a timeout makes every ``recv`` and ``send`` a ``poll``
    and then the call, each giving up the GIL; in a server whose threads
    hand the GIL over at each of them, that is a thread switch more per
    frame. So a read or write is first tried once directly on the
    descriptor (a socket with a timeout is non-blocking underneath), and
    only one that would block goes through the socket, waiting as its
    timeout says."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def handshake(self, timeout: float) -> None:
        """Nothing to agree on."""

    def buffered(self) -> bool:
        """Whether :meth:`recv` has bytes without reading the socket (a
        reader must not wait for the socket then)."""
        return False

    def recv(self, size: int) -> bytes | None:
        """Bytes received (``b""``: none yet); None once the peer has closed."""
        try:
            data = os.read(self.sock.fileno(), size)  # -1 once closed: EBADF, as recv raises
        except BlockingIOError:
            data = self.sock.recv(size)  # waits as the socket's timeout says
        return data if data else None

    def sendall(self, data: bytes) -> None:
        try:
            written = os.write(self.sock.fileno(), data)
        except BlockingIOError:
            written = 0
        if written < len(data):
            self.sock.sendall(memoryview(data)[written:])  # waits as the socket's timeout says

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


class TlsTransport(PlainTransport):
    """TLS over a TCP socket (see the module documentation): the server's
    side, or with ``server_hostname`` the client's, which checks the
    server's certificate against that name as ``context`` says."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None = None) -> None:
        super().__init__(sock)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_hostname is None, server_hostname=server_hostname
        )
        self._lock = threading.Lock()  # the TLS state
        self._send_lock = threading.Lock()  # taking bytes from the outgoing buffer and sending them
        # What came in the handshake's last read after it finished: a peer
        # may send its first bytes in the same flight as its Finished message.
        self._early: list[bytes] = []

    def handshake(self, timeout: float) -> None:
        """Runs the TLS handshake within ``timeout`` seconds (``ssl.SSLError``,
        ``OSError`` or ``TimeoutError`` if it fails)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                try:
                    self._tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                if done:
                    self._early, _ = self._read_plain()
            self._flush()
            if done:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the TLS handshake did not finish in time")
            previous = self.sock.gettimeout()
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(64 * 1024)
            finally:
                self.sock.settimeout(previous)
            if not data:
                raise ConnectionResetError("the peer closed the connection during the TLS handshake")
            with self._lock:
                self._incoming.write(data)

    def buffered(self) -> bool:
        return bool(self._early)

    def recv(self, size: int) -> bytes | None:
        if self._early:
            early, self._early = self._early, []
            return b"".join(early)
        data = self.sock.recv(size)
        with self._lock:
            if data:
                self._incoming.write(data)
            else:
                self._incoming.write_eof()
            plain, closed = self._read_plain()
            answer = self._outgoing.pending > 0
        if answer:
            self._flush()  # what reading made TLS say (a key update, an alert)
        if plain:
            return b"".join(plain)
        return None if closed or not data else b""

    def _read_plain(self) -> tuple[list[bytes], bool]:
        """The plain bytes of the records in the incoming buffer, and whether
        the peer has closed (under the TLS lock)."""
        plain: list[bytes] = []
        while True:
            try:
                chunk = self._tls.read(64 * 1024)
            except ssl.SSLWantReadError:
                return plain, False
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or the end without it
                return plain, True
            if not chunk:
                return plain, True
            plain.append(chunk)

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                view = memoryview(data)
                while view:
                    written = self._tls.write(view)
                    view = view[written:]
                out = self._outgoing.read()
            self.sock.sendall(out)

    def _flush(self) -> None:
        with self._send_lock:
            with self._lock:
                out = self._outgoing.read()
            if out:
                self.sock.sendall(out)


Transport = PlainTransport
"""What a connection reads and writes through: a plain socket or TLS."""
