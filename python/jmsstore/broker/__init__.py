"""The broker: a JMS server (:class:`JMSServer`) on the file store and the
pager, as parts with one job each (see :mod:`jmsstore.broker.server`), over
the broker core in Rust.

The client API (:mod:`jmsstore.client`) and the JMS vocabulary
(:mod:`jmsstore.jms`) are re-exported here for convenience.
"""

from jmsstore.broker.endpoints import Endpoint
from jmsstore.broker.endpoints import register as register_endpoint
from jmsstore.broker.server import JMSServer, open_all, open_server
from jmsstore.broker.settings import DestinationSettings
from jmsstore.client import (
    AckMode,
    Connection,
    ConnectionFactory,
    MessageConsumer,
    MessageProducer,
    QueueBrowser,
    Session,
)
from jmsstore.jms import (
    BytesMessage,
    DeliveryMode,
    Destination,
    MapMessage,
    Message,
    Queue,
    StreamMessage,
    TemporaryQueue,
    TextMessage,
    Topic,
)

__all__ = [
    "AckMode",
    "BytesMessage",
    "Connection",
    "ConnectionFactory",
    "DeliveryMode",
    "Destination",
    "DestinationSettings",
    "Endpoint",
    "JMSServer",
    "MapMessage",
    "Message",
    "MessageConsumer",
    "MessageProducer",
    "Queue",
    "QueueBrowser",
    "Session",
    "StreamMessage",
    "TemporaryQueue",
    "TextMessage",
    "Topic",
    "open_all",
    "open_server",
    "register_endpoint",
]
