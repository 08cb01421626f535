"""The broker: JMS 2.0 semantics on the file store and the pager.

Layers inside: :mod:`~jmsstore.broker.message` (messages and their
encoding), :mod:`~jmsstore.broker.destination` (names and settings),
:mod:`~jmsstore.broker.server` (destinations, subscriptions, persistence,
recovery) and :mod:`~jmsstore.broker.connection` (the client API).
"""

from jmsstore.broker.connection import (
    AckMode,
    Connection,
    ConnectionFactory,
    MessageConsumer,
    MessageProducer,
    QueueBrowser,
    Session,
)
from jmsstore.broker.destination import Destination, DestinationSettings, Queue, TemporaryQueue, Topic
from jmsstore.broker.message import BytesMessage, DeliveryMode, MapMessage, Message, StreamMessage, TextMessage
from jmsstore.broker.server import JMSServer

__all__ = [
    "AckMode",
    "BytesMessage",
    "Connection",
    "ConnectionFactory",
    "DeliveryMode",
    "Destination",
    "DestinationSettings",
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
]
