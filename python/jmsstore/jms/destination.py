"""Destinations as applications see them: names.

A :class:`Queue` or :class:`Topic` is a value: a kind and a name, equal to
any other with the same kind and name (as a JMS ``Queue`` object is). The
server keeps the state behind the name; a destination deleted on the server
makes sends to its name fail with :class:`InvalidDestinationError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from jmsstore.errors import InvalidArgumentError

__all__ = ["Destination", "Queue", "TemporaryQueue", "Topic", "check_name"]

_NAME = re.compile(r"[A-Za-z0-9_.$-][A-Za-z0-9_.$:-]{0,199}\Z")


def check_name(what: str, name: object) -> str:
    """A destination or subscription name: 1 to 200 of letters, digits and ``_ . $ - :``."""
    if not isinstance(name, str):
        raise TypeError(f"a {what} name is a str, not {type(name).__name__}")
    if not _NAME.match(name):
        raise InvalidArgumentError(
            f"{what} name {name!r} must be 1 to 200 characters of letters, digits and _ . $ - : (not starting with ':')"
        )
    return name


class Destination:
    """A queue or topic by name."""

    kind = "destination"
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = check_name(self.kind, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Destination) and other.kind == self.kind and other.name == self.name

    def __hash__(self) -> int:
        return hash((self.kind, self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Queue(Destination):
    """Point-to-point: each message goes to one consumer."""

    kind = "queue"
    __slots__ = ()


class Topic(Destination):
    """Publish/subscribe: each message goes to every subscription."""

    kind = "topic"
    __slots__ = ()


class TemporaryQueue(Queue):
    """A queue that lives as long as the connection that created it, and is never stored."""

    kind = "temp-queue"
    __slots__ = ("_delete",)

    def __init__(self, name: str, delete: Callable[[TemporaryQueue], None] | None = None) -> None:
        super().__init__(name)
        self._delete = delete

    def delete(self) -> None:
        """Deletes the queue (JMS: fails while it has consumers)."""
        if self._delete is None:
            raise InvalidArgumentError(f"{self!r} is a reference received in a message; its connection deletes it")
        self._delete(self)
