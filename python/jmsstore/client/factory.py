"""The connection factory (JMS ``ConnectionFactory``) and its settings."""

from __future__ import annotations

from jmsstore._args import integer
from jmsstore.client.connection import Connection
from jmsstore.client.flow import ConsumerFlow
from jmsstore.client.port import BrokerPort, Clock, SendOptions
from jmsstore.client.producer import ONE_WAY_MODES, ProducerSettings
from jmsstore.errors import InvalidArgumentError
from jmsstore.jms.destination import check_name
from jmsstore.jms.message import check_unit_of_order

__all__ = ["ConnectionFactory"]


class ConnectionFactory:
    """Creates connections to one server (JMS ``ConnectionFactory``).

    ``messages_maximum``: how many messages a consumer reserves ahead
    (WebLogic's MessagesMaximum pipeline, default 10; raise it for
    throughput, lower it for fairness between consumers).
    ``send_timeout`` (ms): how long a send waits for room in a full quota
    (WebLogic's blocking sends; 0: fail at once). ``flow_*``: WebLogic's
    producer flow control (Flow Maximum and Minimum messages per second,
    Flow Interval seconds in Flow Steps). ``send_async_window`` messages and
    ``send_async_window_bytes`` (encoded): how much a producer may have
    sent with ``send_async`` and not yet seen completed before the next
    ``send_async`` blocks until completions bring it back under.

    Open MQ's consumer flow control, alongside: ``consumer_flow_limit``
    (imqConsumerFlowLimit; when given, the limit in place of
    ``messages_maximum``; a destination's smaller ``consumer_flow_limit``
    wins), ``consumer_flow_threshold`` (imqConsumerFlowThreshold, percent,
    default 50: a consumer's buffer is refilled, up to the limit, once at
    most that share of the limit is left), ``connection_flow_limit``
    (imqConnectionFlowLimit, default 1000: the messages buffered for all
    consumers of one connection, when ``connection_flow_limit_enabled``).
    ``prefetch=False``: a synchronous ``receive`` reserves one message when
    it is called and nothing ahead.

    WebLogic's one-way sends: ``one_way_send_mode`` (``queues_and_topics``,
    ``topics_only`` or None, the default) and ``one_way_window_size``
    (default 1: every send is two-way); see :meth:`MessageProducer.send`.

    ``unit_of_order``: the unit of order every producer of this factory's
    connections starts with (WebLogic's connection factory Unit-of-Order
    setting; None, the default: none); see :attr:`MessageProducer.unit_of_order`.
    """

    def __init__(
        self,
        port: BrokerPort,
        *,
        client_id: str | None = None,
        messages_maximum: int = 10,
        send_timeout: int = 10,
        flow_control_enabled: bool = True,
        flow_maximum: int = 500,
        flow_minimum: int = 50,
        flow_interval: int = 60,
        flow_steps: int = 10,
        send_async_window: int = 1024,
        send_async_window_bytes: int = 64 << 20,
        consumer_flow_limit: int | None = None,
        consumer_flow_threshold: int = 50,
        connection_flow_limit: int = 1000,
        connection_flow_limit_enabled: bool = False,
        prefetch: bool = True,
        one_way_send_mode: str | None = None,
        one_way_window_size: int = 1,
        unit_of_order: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.port = port
        if client_id is not None:
            check_name("client id", client_id)
        if isinstance(messages_maximum, bool) or not isinstance(messages_maximum, int):
            raise TypeError(f"messages_maximum is an int, not {type(messages_maximum).__name__}")
        if not 1 <= messages_maximum <= 1_000_000:
            raise InvalidArgumentError(f"messages_maximum must be within 1..1000000, not {messages_maximum}")
        # WebLogic's defaults: Send Timeout 10 ms, Flow Maximum 500, Flow
        # Minimum 50 messages/s, Flow Interval 60 s in 10 Flow Steps.
        self.send_timeout = integer("send_timeout (ms)", send_timeout, 0, 1 << 40)
        if not isinstance(flow_control_enabled, bool):
            raise TypeError(f"flow_control_enabled is a bool, not {type(flow_control_enabled).__name__}")
        self.flow_control_enabled = flow_control_enabled
        self.flow_maximum = integer("flow_maximum", flow_maximum, 1, 1 << 31)
        self.flow_minimum = integer("flow_minimum", flow_minimum, 1, 1 << 31)
        if self.flow_minimum > self.flow_maximum:
            raise InvalidArgumentError(f"flow_minimum ({flow_minimum}) must not be above flow_maximum ({flow_maximum})")
        self.flow_interval = integer("flow_interval (s)", flow_interval, 1, 1 << 31)
        self.flow_steps = integer("flow_steps", flow_steps, 1, 1 << 20)
        self.send_async_window = integer("send_async_window", send_async_window, 1, 1 << 31)
        self.send_async_window_bytes = integer("send_async_window_bytes", send_async_window_bytes, 1, 1 << 50)
        self.consumer_flow_limit = (
            None if consumer_flow_limit is None else integer("consumer_flow_limit", consumer_flow_limit, 1, 1_000_000)
        )
        self.consumer_flow_threshold = integer("consumer_flow_threshold (%)", consumer_flow_threshold, 0, 100)
        self.connection_flow_limit = integer("connection_flow_limit", connection_flow_limit, 1, 1 << 31)
        for name, flag in (("connection_flow_limit_enabled", connection_flow_limit_enabled), ("prefetch", prefetch)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} is a bool, not {type(flag).__name__}")
        self.connection_flow_limit_enabled = connection_flow_limit_enabled
        self.prefetch = prefetch
        if one_way_send_mode is not None and one_way_send_mode not in ONE_WAY_MODES:
            raise InvalidArgumentError(
                f"one_way_send_mode must be one of {', '.join(ONE_WAY_MODES)} or None, not {one_way_send_mode!r}"
            )
        self.one_way_send_mode = one_way_send_mode
        self.one_way_window_size = integer("one_way_window_size", one_way_window_size, 1, 1 << 31)
        self.unit_of_order = check_unit_of_order("unit_of_order", unit_of_order)
        self.clock = clock
        self.client_id = client_id
        self.messages_maximum = messages_maximum

    def send_options(self) -> SendOptions:
        """What a producer of this factory's connections sends with."""
        return SendOptions(
            self.send_timeout,
            self.flow_control_enabled,
            self.flow_maximum,
            self.flow_minimum,
            self.flow_interval,
            self.flow_steps,
            self.clock,
        )

    def create_connection(self, client_id: str | None = None) -> Connection:
        """A new, stopped connection; ``client_id`` must not be in use."""
        return Connection(
            self.port,
            client_id if client_id is not None else self.client_id,
            self.messages_maximum,
            self.send_options(),
            ProducerSettings(
                self.send_async_window,
                self.send_async_window_bytes,
                self.one_way_send_mode,
                self.one_way_window_size,
                self.unit_of_order,
            ),
            ConsumerFlow(self.consumer_flow_limit, self.consumer_flow_threshold, self.prefetch),
            self.connection_flow_limit if self.connection_flow_limit_enabled else None,
        )
