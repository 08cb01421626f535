"""The exception hierarchy.

Every error jmsstore raises derives from :class:`JmsStoreError`. The file
store's errors derive from :class:`StoreError`; the classes are created by
the native module so that Rust and Python raise the very same types.
"""

from jmsstore._native import (
    CorruptionError,
    InvalidArgumentError,
    JmsStoreError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StorePoisonedError,
    UnknownHandleError,
    UnsupportedFormatError,
)

__all__ = [
    "CorruptionError",
    "InvalidArgumentError",
    "JmsStoreError",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StoreLockedError",
    "StorePoisonedError",
    "UnknownHandleError",
    "UnsupportedFormatError",
]


# ------------------------------------------------------------------ broker (JMS) errors
# Plain Python classes: the broker is Python. Names follow the JMS exceptions
# (javax.jms.*Exception) with Python's Error suffix.


class JMSError(JmsStoreError):
    """Base of the broker's errors (``javax.jms.JMSException``)."""


class IllegalStateError(JMSError):
    """The object is closed, or the call is not allowed in its current state."""


class ConfigError(JmsStoreError):
    """A configuration file is wrong: ``path``, ``key`` (dotted, "" for the
    whole file) and ``reason`` say where and why."""

    def __init__(self, path: str, key: str, reason: str) -> None:
        super().__init__(f"{path}: {key}: {reason}" if key else f"{path}: {reason}")
        self.path = path
        self.key = key
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (ConfigError, (self.path, self.key, self.reason))


class ServerNotFoundError(JMSError):
    """The store holds no JMS server of that name; ``found`` names the servers it does hold."""

    def __init__(self, message: str, found: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.found = tuple(found)

    def __reduce__(self) -> tuple[type, tuple[str, tuple[str, ...]]]:
        return (ServerNotFoundError, (str(self), self.found))


class DestinationPausedError(IllegalStateError):
    """Production is paused on the destination or its server (WebLogic's
    runtime pause): sends fail until it is resumed."""


class InvalidDestinationError(JMSError):
    """The destination does not exist (or no longer exists), or is not usable here."""


class InvalidClientIDError(JMSError):
    """The client id is already in use by another connection, or is not valid."""


class MessageFormatError(JMSError, TypeError):
    """A property or body value has a type the message cannot hold."""


class MessageNotWriteableError(JMSError):
    """A received message's properties or body are read-only until cleared."""


class ResourceAllocationError(JMSError):
    """The server cannot take the message (size or resource limits)."""


class MessageTooLargeError(ResourceAllocationError):
    """The encoded message is larger than the server's maximum message size."""


class TransactionRolledBackError(JMSError):
    """A commit failed and the transaction was rolled back instead."""


__all__ += [
    "ConfigError",
    "DestinationPausedError",
    "IllegalStateError",
    "InvalidClientIDError",
    "InvalidDestinationError",
    "JMSError",
    "MessageFormatError",
    "MessageNotWriteableError",
    "MessageTooLargeError",
    "ResourceAllocationError",
    "ServerNotFoundError",
    "TransactionRolledBackError",
]
