"""The errors of a remote connection, beside the JMS errors a server's
ERROR frame is mapped back to."""

from __future__ import annotations

from jmsstore import errors
from jmsstore.errors import JMSError, JmsStoreError

__all__ = ["StompConnectionError", "StompServerError", "UnsupportedOverStompError", "server_error"]


class StompConnectionError(JMSError):
    """The STOMP connection to the server could not be made, was lost, or
    did not answer in time. Every later call on that JMS connection raises
    it too: close the connection and open a new one."""


class StompServerError(JMSError):
    """The server refused a frame with an ERROR frame (the message is its
    ``message`` header) and closed the connection."""


class UnsupportedOverStompError(JMSError, NotImplementedError):
    """A JMS feature that a remote connection cannot offer, because STOMP has
    no form for it; the message names the feature."""


def server_error(message: str) -> JmsStoreError:
    """The error an ERROR frame's ``message`` stands for: the jmsstore error
    it names (``InvalidClientIDError: ...`` from jmsstore, or the JMS
    exception ``javax.jms.InvalidClientIDException: ...`` from ActiveMQ),
    else a :class:`StompServerError`."""
    name, colon, _ = message.partition(":")
    if colon and name.replace(".", "_").isidentifier():
        simple = name.rsplit(".", 1)[-1]
        if simple.endswith("Exception"):
            simple = simple[: -len("Exception")] + "Error"
        kind = getattr(errors, simple, None) if not simple.startswith("_") else None
        if isinstance(kind, type) and issubclass(kind, JMSError):
            return kind(f"the server says: {message}")
    return StompServerError(f"the server says: {message}")
