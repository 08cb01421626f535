"""The remote client: the JMS client API over STOMP 1.2.

``connect("stomp://127.0.0.1:61613")`` returns a
:class:`~jmsstore.ConnectionFactory` whose connections, sessions,
producers and consumers are the embedded ones, reaching the server through
a STOMP port (:mod:`jmsstore.net.remote.port`) instead of an embedded
broker: an application moves from embedded to remote by changing the line
that makes its factory.
"""

from jmsstore.net.remote.errors import StompConnectionError, StompServerError, UnsupportedOverStompError
from jmsstore.net.remote.factory import connect

__all__ = ["StompConnectionError", "StompServerError", "UnsupportedOverStompError", "connect"]
