"""The JMS vocabulary that applications, the client API and the broker
share: messages (:mod:`~jmsstore.jms.message`: the four body types, typed
properties, and the binary encoding the store and pager hold) and
destinations (:mod:`~jmsstore.jms.destination`: queues and topics by name).
"""

from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic, check_name
from jmsstore.jms.message import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    StreamMessage,
    TextMessage,
)

__all__ = [
    "BytesMessage",
    "DeliveryMode",
    "Destination",
    "MapMessage",
    "Message",
    "Queue",
    "StreamMessage",
    "TemporaryQueue",
    "TextMessage",
    "Topic",
    "check_name",
]
