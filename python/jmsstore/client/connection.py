"""The connection (JMS ``Connection``): a client's link to a broker, owning
sessions and temporary queues; it delivers only while started."""

from __future__ import annotations

import threading
import time

from jmsstore.client.flow import ConnectionFlow, ConsumerFlow
from jmsstore.client.port import BrokerPort, SendOptions
from jmsstore.client.producer import ProducerSettings
from jmsstore.client.session import AckMode, Session
from jmsstore.errors import IllegalStateError, InvalidArgumentError
from jmsstore.jms.destination import TemporaryQueue, check_name

__all__ = ["Connection"]


class Connection:
    """A client's connection (JMS ``Connection``): owns sessions and
    temporary queues; delivers only while started."""

    def __init__(
        self,
        port: BrokerPort,
        client_id: str | None,
        messages_maximum: int,
        send: SendOptions,
        producer_settings: ProducerSettings,
        consumer_flow: ConsumerFlow,
        connection_flow_limit: int | None,
    ) -> None:
        self.port = port
        self.messages_maximum = messages_maximum
        self.send_options = send
        self.producer_settings = producer_settings
        self.consumer_flow = consumer_flow
        # Open MQ's connection flow limit, when enabled: shared by its consumers.
        self.connection_flow = None if connection_flow_limit is None else ConnectionFlow(connection_flow_limit)
        self._client_id: str | None = None
        self._started = False
        self._closed = False
        self._closing = False  # close() has begun: no new session
        self._used = False
        # Guards the state below and wakes waiters on start/stop/close.
        self._cond = threading.Condition()
        self._sessions: list[Session] = []
        self._temporary: list[TemporaryQueue] = []
        self._dispatching = 0  # sessions delivering to a listener now (JMS 2.0 §6.1.5)
        if client_id is not None:
            check_name("client id", client_id)
        self.id = port.register_connection(self, client_id)
        self._client_id = client_id

    @property
    def client_id(self) -> str | None:
        return self._client_id

    @client_id.setter
    def client_id(self, value: str) -> None:
        with self._cond:
            self._check_open()
            if self._closing:
                raise IllegalStateError("the connection is closing")
            if self._client_id is not None or self._used:
                raise IllegalStateError("the client id can only be set once, before the connection is used")
            check_name("client id", value)
            self.port.set_client_id(value)
            self._client_id = value

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the connection is closed")

    def check_open(self) -> None:
        """Raises ``IllegalStateError`` if the connection is closed."""
        if self._closed:  # _check_open, inline: this runs per send and per receive
            raise IllegalStateError("the connection is closed")

    def create_session(self, transacted: bool = False, ack_mode: AckMode = AckMode.AUTO) -> Session:
        """A new session; ``ack_mode`` is ignored when ``transacted``."""
        if not isinstance(transacted, bool):
            raise TypeError(f"transacted is a bool, not {type(transacted).__name__}")
        if not transacted:
            try:
                ack_mode = AckMode(ack_mode)
            except ValueError:
                raise InvalidArgumentError(
                    f"ack_mode must be AckMode.AUTO, CLIENT or DUPS_OK, not {ack_mode!r}"
                ) from None
            if ack_mode == AckMode.SESSION_TRANSACTED:
                raise InvalidArgumentError("SESSION_TRANSACTED needs transacted=True")
        with self._cond:
            self._check_open()
            if self._closing:
                raise IllegalStateError("the connection is closing")
            self._used = True
            session = Session(self, transacted, AckMode.SESSION_TRANSACTED if transacted else ack_mode)
            self._sessions.append(session)
        return session

    def start(self) -> None:
        """Starts (or resumes) delivery to this connection's consumers."""
        with self._cond:
            self._check_open()
            self._used = True
            self._started = True
            self._cond.notify_all()
            sessions = list(self._sessions)
        for session in sessions:
            session.wake()

    def stop(self) -> None:
        """Pauses delivery; ``receive`` waits and listeners are not called until :meth:`start`."""
        with self._cond:
            self._check_open()
            self._started = False
            # JMS 2.0 §6.1.5: stop returns once running listeners have returned (a
            # listener stopping its own connection does not wait: two could wait for each other).
            me = threading.current_thread()
            if all(not s.runs_on(me) for s in self._sessions):
                while self._dispatching:
                    self._cond.wait(0.05)

    @property
    def started(self) -> bool:
        return self._started

    @property
    def sessions(self) -> list[Session]:
        """The connection's open sessions."""
        with self._cond:
            return list(self._sessions)

    def wait_started(self, deadline: float | None) -> bool:
        """Waits until the connection is started (or closed), at most until
        ``deadline`` (monotonic; None: forever); whether it is started."""
        with self._cond:
            while not self._started and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 0.5)
            return self._started

    def begin_dispatch(self) -> bool:
        """A session is about to call a listener: False if the connection is
        stopped (then it must not). ``Connection.stop`` waits for it."""
        with self._cond:
            if not self._started:
                return False
            self._dispatching += 1
            return True

    def end_dispatch(self) -> None:
        with self._cond:
            self._dispatching -= 1
            self._cond.notify_all()

    def forget_session(self, session: Session) -> None:
        with self._cond:
            if session in self._sessions:
                self._sessions.remove(session)

    def add_temporary(self, queue: TemporaryQueue) -> bool:
        """Keeps a temporary queue (deleted with the connection); False if the
        connection is closing (the caller deletes it)."""
        with self._cond:
            if self._closing or self._closed:
                return False
            self._temporary.append(queue)
            return True

    def owns(self, queue: TemporaryQueue) -> bool:
        return queue in self._temporary

    def close(self) -> None:
        """Closes every session (unacknowledged messages return), deletes the
        temporary queues and frees the client id. Idempotent, and safe from
        several threads at once."""
        with self._cond:
            if self._closing:
                return
            self._closing = True  # no session is created from now on
            sessions = list(self._sessions)
            temporary, self._temporary = self._temporary, []
        for session in sessions:
            session.close()
        for queue in temporary:
            self.port.delete_temporary_queue(queue, force=True)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.port.release_connection(self, self._client_id)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
