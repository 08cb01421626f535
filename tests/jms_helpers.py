"""Fixtures and helpers shared by the JMS conformance suite (``tests/test_jms_*.py``).

Loaded as a pytest plugin by ``conftest.py`` (``pytest_plugins``), so its fixtures are
available to every test; the test modules import the plain helpers from here.

Fixtures:

- ``server_dir``: the server's home (``tmp_path / "srv"``).
- ``servers``: opens servers on ``server_dir`` (1 MiB segments) and closes them all at
  teardown; ``servers.restart(server)`` closes a server and reopens the directory with the
  same options (and any given as overrides).
- ``server``: an open, empty server.
- ``restart``: ``restart(server, **overrides) -> JMSServer`` (``servers.restart``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import (
    AckMode,
    Connection,
    Destination,
    JMSServer,
    Message,
    MessageConsumer,
    Queue,
    TextMessage,
)
from jmsstore.store import FileStore

SMALL_SEGMENT = 1 << 20
NOTHING = 0.5  # seconds a receive waits in "nothing arrives" checks
SOON = 5.0  # seconds a receive may wait for a message that must arrive
DRAINED = 0.0  # a drain stops at the first empty receive: every message it expects is in place before


class Servers:
    """Opens servers on one directory and closes every one of them at teardown."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.opened: list[JMSServer] = []
        self.options: dict[str, Any] = {"max_segment_bytes": SMALL_SEGMENT}

    def open(self, **options: Any) -> JMSServer:
        self.options = {**self.options, **options}
        server = JMSServer(self.directory, **self.options)
        self.opened.append(server)
        return server

    def restart(self, server: JMSServer, **overrides: Any) -> JMSServer:
        """Closes ``server`` (cleanly) and opens its directory again."""
        server.close()
        return self.open(**overrides)

    def close_all(self) -> None:
        for server in reversed(self.opened):
            server.close()


@pytest.fixture
def server_dir(tmp_path: Path) -> Path:
    return tmp_path / "srv"


@pytest.fixture
def servers(server_dir: Path) -> Iterator[Servers]:
    opened = Servers(server_dir)
    yield opened
    opened.close_all()


@pytest.fixture
def server(servers: Servers) -> JMSServer:
    return servers.open()


@pytest.fixture
def restart(servers: Servers) -> Any:
    return servers.restart


# ---------------------------------------------------------------- plain helpers


def connect(server: JMSServer, client_id: str | None = None, *, start: bool = True, **options: Any) -> Connection:
    """A connection (started unless ``start=False``); ``options`` go to the connection factory."""
    connection = server.connection_factory(**options).create_connection(client_id)
    if start:
        connection.start()
    return connection


def send_texts(server: JMSServer, destination: Destination, texts: Iterable[str], **send_options: Any) -> None:
    """Sends one TextMessage per text from a fresh AUTO session, in order."""
    with connect(server, start=False) as connection:
        session = connection.create_session()
        producer = session.create_producer(destination)
        for text in texts:
            producer.send(TextMessage(text), **send_options)


def drain(consumer: MessageConsumer, timeout: float = DRAINED) -> list[Message]:
    """Every message the consumer receives until one receive times out."""
    received: list[Message] = []
    while (message := consumer.receive(timeout)) is not None:
        received.append(message)
    return received


def texts(messages: Iterable[Message]) -> list[str | None]:
    out: list[str | None] = []
    for message in messages:
        assert isinstance(message, TextMessage), message
        out.append(message.text)
    return out


def receive_all(server: JMSServer, destination: Destination, selector: str | None = None) -> list[Message]:
    """Consumes (AUTO) everything a fresh consumer gets from a queue."""
    with connect(server) as connection:
        session = connection.create_session(False, AckMode.AUTO)
        consumer = session.create_consumer(destination, selector)
        return drain(consumer)


def browse_texts(server: JMSServer, queue: Queue) -> list[str | None]:
    """The texts waiting on ``queue``, in delivery order, without consuming them."""
    with connect(server, start=False) as connection:
        session = connection.create_session()
        with session.create_browser(queue) as browser:
            return texts(browser.messages())


def eventually(predicate: Callable[[], bool], what: str = "the condition never held") -> None:
    """Until ``predicate()`` holds, for at most SOON seconds."""
    deadline = time.monotonic() + SOON
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def wait_for_idle_consumer(server: JMSServer, queue: Queue) -> None:
    """Until a consumer waits idle on ``queue`` (its receive looked, found nothing, and sleeps)."""
    bell = server.registry.queues[queue.name].target.bell
    deadline = time.monotonic() + SOON
    while bell.waiting()[1] == 0:
        assert time.monotonic() < deadline, "the consumer never went idle"
        time.sleep(0.005)


class FailingCommits:
    """Makes the next ``armed`` synchronous store transactions fail as a full disk
    fails them (``StoreFullError``, nothing written, the store stays usable): the
    store's own fault injection (``NativeStore.inject_full_writes``)."""

    def __init__(self, store: FileStore) -> None:
        self._store = store
        self._armed = 0

    @property
    def armed(self) -> int:
        return self._armed

    @armed.setter
    def armed(self, n: int) -> None:
        self._armed = n
        self._store.native.inject_full_writes(n)
