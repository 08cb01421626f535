"""The queue browser (JMS ``QueueBrowser``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from jmsstore.client.port import BrokerPort
from jmsstore.errors import IllegalStateError
from jmsstore.jms.destination import Queue
from jmsstore.jms.message import Message
from jmsstore.selector import Selector


class _Session(Protocol):
    """What a browser needs of its session."""

    @property
    def port(self) -> BrokerPort: ...

    def check_open(self) -> None: ...


__all__ = ["QueueBrowser"]


class QueueBrowser:
    """Looks at a queue's waiting messages without consuming them (JMS
    ``QueueBrowser``), in delivery order. Messages consumed while it
    browses are skipped."""

    def __init__(self, session: _Session, queue: Queue, selector: Selector) -> None:
        self._session = session
        self.queue = queue
        self._selector = selector
        self._closed = False

    @property
    def selector(self) -> str | None:
        return self._selector.text or None

    def __iter__(self) -> Iterator[Message]:
        for message in self._session.port.browse(self.queue, self._selector):
            if self._closed:
                raise IllegalStateError("the browser is closed")
            self._session.check_open()
            yield message

    def messages(self) -> list[Message]:
        """Every message the browser sees now."""
        return list(self)

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> QueueBrowser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
