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
import socket
import ssl
import threading
import time

__all__ = ["PlainTransport", "TlsTransport", "Transport", "server_tls_context"]


def server_tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server-side TLS context with the standard library's defaults
    (TLS 1.2 or later) and the given certificate chain and private key."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


class PlainTransport:
    """A TCP socket as it is."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def handshake(self, timeout: float) -> None:
        """Nothing to agree on."""

    def recv(self, size: int) -> bytes | None:
        """Bytes received (``b""``: none yet); None once the peer has closed."""
        data = self.sock.recv(size)
        return data if data else None

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


class TlsTransport(PlainTransport):
    """TLS over a TCP socket, the server's side (see the module documentation)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        super().__init__(sock)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._lock = threading.Lock()  # the TLS state
        self._send_lock = threading.Lock()  # taking bytes from the outgoing buffer and sending them

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
                raise ConnectionResetError("the client closed the connection during the TLS handshake")
            with self._lock:
                self._incoming.write(data)

    def recv(self, size: int) -> bytes | None:
        data = self.sock.recv(size)
        closed = not data
        plain: list[bytes] = []
        with self._lock:
            if closed:
                self._incoming.write_eof()
            else:
                self._incoming.write(data)
            while True:
                try:
                    chunk = self._tls.read(64 * 1024)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # close_notify
                    closed = True
                    break
                except ssl.SSLEOFError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                plain.append(chunk)
            answer = self._outgoing.pending > 0
        if answer:
            self._flush()  # what reading made TLS say (a key update, an alert)
        if plain:
            return b"".join(plain)
        return None if closed else b""

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
