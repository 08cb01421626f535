"""The JMS client API (JMS 2.0 "classic" API, in snake_case): connection
factory, connection, session, producer, consumer and queue browser.

The client reaches a broker through one narrow interface,
:class:`~jmsstore.client.port.BrokerPort`; ``jmsstore.broker`` provides it
for an embedded server (``JMSServer.connection_factory()``).

Timeouts are in seconds; ``time_to_live``, ``delivery_delay`` and the
header times are in milliseconds, as in JMS.
"""

from jmsstore.client.browser import QueueBrowser
from jmsstore.client.connection import Connection
from jmsstore.client.consumer import MessageConsumer, MessageListener
from jmsstore.client.factory import ConnectionFactory
from jmsstore.client.producer import MessageProducer, SendFuture
from jmsstore.client.session import AckMode, Session

__all__ = [
    "AckMode",
    "Connection",
    "ConnectionFactory",
    "MessageConsumer",
    "MessageListener",
    "MessageProducer",
    "QueueBrowser",
    "SendFuture",
    "Session",
]
