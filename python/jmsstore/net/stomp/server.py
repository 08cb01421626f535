"""A STOMP 1.2 server over an embedded JMS server.

:class:`StompServer` listens on a TCP address and serves STOMP 1.2
clients (stomp.py, stomp.js, the ActiveMQ, Artemis and RabbitMQ client
libraries…) with the destinations of a :class:`~jmsstore.JMSServer`,
mapping frames to JMS the way ActiveMQ Classic does (see
:mod:`jmsstore.net.stomp.mapping`). It talks to the broker only through
the client interface (:mod:`jmsstore.client.port`) and the server's
public methods.

Threads, not an event loop: one accept thread, a reader thread per
connection (frames are handled in order, as STOMP requires) and a
dispatcher thread per subscription, with one write lock per connection.
The broker's calls block (a send waiting for the disk or for room in a
quota, a fetch writing its delivery record) and release the GIL while
they wait, so threads let one slow client hold up only itself.
``max_connections``, ``max_subscriptions`` (per connection) and
``max_total_subscriptions`` bound the threads; a connection over the
limit gets an ERROR frame and is closed. The bytes of incomplete frames
held for all connections together are bounded by ``max_buffered_bytes``
(see :class:`StompSettings`), so the server's memory stays bounded
whatever its clients send.

Example::

    server = JMSServer("/var/lib/jmsstore")
    stomp = StompServer(server, port=61613)
    stomp.start()
    ...
    stomp.close()
    server.close()
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import ssl
import threading
import time
from typing import Any, Protocol

from jmsstore.client.factory import ConnectionFactory
from jmsstore.client.port import BrokerPort, SendOptions
from jmsstore.errors import IllegalStateError, InvalidDestinationError
from jmsstore.jms.destination import Destination, Queue, Topic
from jmsstore.net.stomp.connection import StompConnection
from jmsstore.net.stomp.frames import FrameLimits, encode, error_frame
from jmsstore.net.stomp.mapping import ProtocolError, destination_name
from jmsstore.net.stomp.resources import ByteBudget, Slots
from jmsstore.net.stomp.security import Security
from jmsstore.net.stomp.settings import StompSettings
from jmsstore.net.stomp.statistics import StompStatistics

__all__ = ["Broker", "StompServer", "serve"]

log = logging.getLogger("jmsstore.net.stomp")

# accept() errors that say the process or system is short of a resource
# (file descriptors, buffers): retrying at once would spin.
_SHORT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_ACCEPT_BACK_OFF = 0.1


class Broker(Protocol):
    """What a STOMP server needs of a JMS server (:class:`~jmsstore.JMSServer` has it)."""

    @property
    def port(self) -> BrokerPort: ...

    @property
    def maximum_message_size(self) -> int: ...

    def create_queue(self, name: str) -> Queue: ...

    def create_topic(self, name: str) -> Topic: ...

    def connection_factory(self) -> ConnectionFactory: ...


class StompServer:
    """Serves STOMP 1.2 clients on ``host:port`` (port 0: any free port;
    read :attr:`address` after :meth:`start`). ``settings`` or keyword
    options: see :class:`StompSettings`. Binds to the loopback interface
    unless told otherwise. ``security``: the users who may connect and
    what each may do (:class:`~jmsstore.net.stomp.security.Security`);
    without it, or with no users, any client may connect and do anything.
    ``tls``: serve STOMP over TLS with this server-side context (see
    :func:`~jmsstore.net.stomp.transport.server_tls_context`); the
    handshake runs on the connection's thread, within ``connect_timeout``."""

    def __init__(
        self,
        jms_server: Broker,
        host: str = "127.0.0.1",
        port: int = 61613,
        settings: StompSettings | None = None,
        *,
        security: Security | None = None,
        tls: ssl.SSLContext | None = None,
        **options: Any,
    ) -> None:
        if settings is not None and options:
            raise TypeError("give settings or keyword options, not both")
        self.settings = settings if settings is not None else StompSettings(**options)
        self._broker = jms_server
        self.port: BrokerPort = jms_server.port
        self.send_options: SendOptions = jms_server.connection_factory().send_options()
        self.stats = StompStatistics()
        self.security = security if security is not None else Security(())
        self.tls = tls
        self.frame_limits: FrameLimits = self.settings.effective_frame_limits(jms_server.maximum_message_size)
        self.buffers = ByteBudget(self.settings.max_buffered_bytes)
        self.subscription_slots = Slots(self.settings.max_total_subscriptions)
        self._host = host
        self._port_number = port
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._lock = threading.Lock()
        self._connections: set[StompConnection] = set()
        self._create_lock = threading.Lock()  # checking and creating a destination a client names
        self._auto_created = 0  # destinations created because a client named them
        self._closed = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> StompServer:
        """Binds and starts accepting connections (``OSError`` if the address is taken)."""
        if self._listener is not None:
            raise IllegalStateError("the STOMP server has already started")
        listener = socket.create_server((self._host, self._port_number), backlog=128)
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept_loop, name="jmsstore-stomp-accept", daemon=True)
        self._accepting.start()
        host, port = self.address
        log.info("stomp: listening on %s:%d", host, port)
        return self

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the server listens on."""
        if self._listener is None:
            raise IllegalStateError("the STOMP server has not started")
        host, port = self._listener.getsockname()[:2]
        return host, port

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._closed:
            try:
                sock, address = listener.accept()
            except OSError as e:
                if self._closed:
                    return
                if e.errno in _SHORT_OF_RESOURCES:
                    log.warning("stomp: cannot accept a connection: %s", e.strerror or e)
                    time.sleep(_ACCEPT_BACK_OFF)
                continue  # else a connection reset before it was accepted
            peer = f"{address[0]}:{address[1]}"
            try:
                self._admit(sock, peer)
            except Exception:
                # The accept thread must outlive whatever one connection does to it.
                log.exception("stomp %s: admitting the connection failed", peer)
                with contextlib.suppress(OSError):
                    sock.close()

    def _admit(self, sock: socket.socket, peer: str) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            full = len(self._connections) >= self.settings.max_connections
            if not full and not self._closed:
                connection = StompConnection(self, sock, peer, self.tls)
                self._connections.add(connection)
        if full or self._closed:
            self._refuse(sock, peer, "the server is shutting down" if self._closed else "too many connections")
            return
        self.stats.opened()
        try:
            connection.start()
        except RuntimeError:  # no thread for it
            self.forget(connection)
            connection.abandon()
            self._refuse(sock, peer, "the server cannot take another connection now")
            return
        log.info("stomp %s (%s): accepted", peer, connection.session)

    def _refuse(self, sock: socket.socket, peer: str, why: str) -> None:
        """Tells a connection why it is refused, in an ERROR frame, and closes it."""
        self.stats.refused()
        log.info("stomp %s: refused (%s)", peer, why)
        try:
            if self.tls is None:  # (a TLS client could not read a frame sent in clear)
                # A client that does not read must not hold up the accept thread.
                sock.settimeout(1.0)
                sock.sendall(encode(error_frame(why)))
        except OSError:
            pass
        finally:
            sock.close()

    def forget(self, connection: StompConnection) -> None:
        """A connection closed (for :class:`StompConnection`)."""
        with self._lock:
            if connection not in self._connections:
                return
            self._connections.discard(connection)
        self.stats.retire(connection.frames)
        self.stats.closed()

    def close(self) -> None:
        """Stops accepting, then closes every connection: each finishes
        the frame it is handling, its transactions abort and its
        unacknowledged messages return. The JMS server stays open."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        if self._accepting is not None:
            self._accepting.join(timeout=5)
        for connection in connections:
            connection.close("the server is shutting down")
        log.info("stomp: closed")

    def __enter__(self) -> StompServer:
        return self.start() if self._listener is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ for connections

    def ensure_destination(self, destination: Destination) -> None:
        """Creates ``destination`` on first use when ``auto_create`` is on
        (ActiveMQ's behaviour), up to ``max_auto_created_destinations``; else
        ``ProtocolError`` unless it exists. Looked up every time (a
        dictionary lookup): a destination deleted while clients use it is
        made again by the next one naming it, as ActiveMQ does."""
        try:
            self.port.check_destination(destination)
            return
        except InvalidDestinationError:
            if not self.settings.auto_create:
                raise ProtocolError(f"destination {destination_name(destination)} does not exist") from None
        with self._create_lock:
            try:
                self.port.check_destination(destination)
                return  # made by another connection meanwhile
            except InvalidDestinationError:
                pass
            limit = self.settings.max_auto_created_destinations
            if self._auto_created >= limit:
                raise ProtocolError(
                    f"destination {destination_name(destination)} does not exist, and the server's clients "
                    f"have created max_auto_created_destinations ({limit}) destinations already"
                ) from None
            if isinstance(destination, Topic):
                self._broker.create_topic(destination.name)
            else:
                self._broker.create_queue(destination.name)
            self._auto_created += 1

    # ------------------------------------------------------------ statistics

    def statistics(self) -> dict[str, Any]:
        """Plain data: ``connections_open``, ``connections_total``,
        ``connections_refused``, ``errors`` (ERROR frames sent),
        ``heartbeat_timeouts``, ``timeouts`` (connections cut off by
        ``connect_timeout``, ``frame_timeout`` or ``idle_timeout``),
        ``logins_failed``,
        ``subscriptions`` (open now), ``buffered_bytes`` (of incomplete
        frames, now), ``frames_in`` / ``frames_out`` by command, and
        ``native_sends`` (the SEND frames among ``frames_in`` that the broker
        core took without Python: see ``StompSettings.native_sends``),
        ``native_acks`` (the ACK frames among ``frames_in`` the core settled
        without Python: plain ACKs of a ``client`` or ``client-individual``
        subscription, with ``native_sends`` on), ``native_reads`` (reads of
        a client's socket made without Python, while the core took every
        frame that came: counted each time the connection's reader gets the
        socket back, within a heart-beat tick),
        ``receipts_direct`` (the RECEIPT frames among ``frames_out`` written
        by the thread that learnt their SEND was durable, without the
        connection's reader) and ``native_messages`` (the MESSAGE frames
        among ``frames_out`` written by subscriptions dispatched in the
        broker core: see ``StompSettings.native_dispatch``) with
        ``native_message_writes`` (the writes they took: a batch each)."""
        return self.stats.snapshot(self.subscription_slots.used, self.buffers.used)


def serve(jms_server: Broker, host: str = "127.0.0.1", port: int = 61613, **options: Any) -> StompServer:
    """Starts serving ``jms_server`` to STOMP 1.2 clients on ``host:port``;
    the started :class:`StompServer` (close it before the JMS server)."""
    return StompServer(jms_server, host, port, **options).start()
