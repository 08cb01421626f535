"""Network access to jmsstore: the STOMP 1.2 protocol.

This package sits above the broker's public interface and never reaches
into its internals.

``server.listen(host, port)`` (or ``serve(jms_server, host, port)``)
starts a STOMP 1.2 server over an open :class:`~jmsstore.JMSServer`
(``jmsstore serve`` on the command line): importing this package registers
the ``stomp`` protocol with the broker's endpoints.
"""

from jmsstore.broker import register_endpoint
from jmsstore.net.stomp import StompServer, StompSettings, serve

register_endpoint("stomp", serve)

__all__ = ["StompServer", "StompSettings", "serve"]
