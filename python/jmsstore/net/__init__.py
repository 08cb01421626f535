"""Network access to jmsstore: the STOMP 1.2 protocol.

This package sits above the broker's public interface and never reaches
into its internals.

``serve(jms_server, host, port)`` starts a STOMP 1.2 server over an open
:class:`~jmsstore.JMSServer` (``jmsstore serve`` on the command line).
"""

from jmsstore.net.stomp import StompServer, StompSettings, serve

__all__ = ["StompServer", "StompSettings", "serve"]
