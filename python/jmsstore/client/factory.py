"""The connection factory (JMS ``ConnectionFactory``) and its settings."""

from __future__ import annotations

from jmsstore._args import integer
from jmsstore.client.connection import Connection
from jmsstore.client.port import BrokerPort, Clock, SendOptions
from jmsstore.client.producer import AsyncSendWindow
from jmsstore.errors import InvalidArgumentError
from jmsstore.jms.destination import check_name

__all__ = ["ConnectionFactory"]


class ConnectionFactory:
    """Creates connections to one server (JMS ``ConnectionFactory``).

    ``messages_maximum``: how many messages a consumer reserves ahead
    (WebLogic's MessagesMaximum pipeline, default 10; raise it for
    throughput, lower it for fairness between consumers).
    ``send_timeout`` (ms): how long a send waits for room in a full quota
    (WebLogic's blocking sends; 0: fail at once). ``flow_*``: WebLogic's
    producer flow control (Flow Maximum and Minimum messages per second,
    Flow Interval seconds in Flow Steps).
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
            AsyncSendWindow(self.send_async_window, self.send_async_window_bytes),
        )
