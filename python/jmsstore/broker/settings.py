"""A destination's settings (WebLogic's destination overrides and
templates): what the registry stores with each queue and topic and the
broker core applies per message."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from jmsstore._native import check_order
from jmsstore.broker.expiry import parse_logging_policy
from jmsstore.broker.limits import Thresholds
from jmsstore.errors import InvalidArgumentError
from jmsstore.jms.destination import check_name

__all__ = ["EXPIRATION_POLICIES", "DestinationSettings", "default_unit_name"]

EXPIRATION_POLICIES = ("discard", "log", "redirect")


@dataclass(frozen=True)
class DestinationSettings:
    """Per-destination settings (WebLogic's destination overrides).

    - ``order``: delivery order, ``priority`` (JMS priority, then FIFO; the
      default), ``fifo``, ``lifo`` or a sort key (see :meth:`jmsstore.Pager.create_destination`).
    - ``redelivery_delay``: ms before a rolled-back or recovered message may
      be delivered again.
    - ``redelivery_limit``: redeliveries allowed; past it the message goes to
      ``error_destination`` (a queue name) or is dropped; -1: no limit.
    - ``quota``: the name of the quota resource that limits it (see
      :meth:`JMSServer.create_quota`); None: it shares the server's quota.
    - ``bytes_threshold_high`` / ``_low``, ``messages_threshold_high`` /
      ``_low``: flow control arms above high and disarms below low (-1: not
      set; seed 000, Table 12-4).
    - ``expiration_policy``: what happens to an expired message: ``discard``
      (removed), ``log`` (removed, and logged on the ``jmsstore.expiration``
      logger in WebLogic's ``<ExpiredJMSMessage ...>`` format with the
      fields of ``expiration_logging_policy``, e.g. ``"%header%, Name"``)
      or ``redirect`` (moved to ``error_destination``, without expiration).
    - ``messages_limit_override`` (topics): the most messages a subscription
      keeps; at the limit its head message is deleted for a new one, unless
      every message it holds is immune (handed to a consumer, or in a
      transaction): then the new one is accepted over the limit. -1: none.
    - ``consumer_flow_limit``: the most messages reserved ahead for one
      consumer of this destination (Open MQ's destination
      ``consumerFlowLimit``); a connection factory's own limit applies
      where it is smaller. -1: no limit of the destination's.
    - ``default_unit_of_order``: WebLogic's destination Default
      Unit-of-Order: a message sent without a unit of order (see
      :attr:`MessageProducer.unit_of_order`) is put in one system-named
      unit of this destination (:func:`default_unit_name`), so that its
      messages are processed in order, one consumer at a time, as old
      strict-order applications expect of one consumer with a pipeline of
      one. A topic's subscriptions each process the unit on their own.
    """

    order: str = "priority"
    redelivery_delay: int = 0
    redelivery_limit: int = -1
    error_destination: str | None = None
    quota: str | None = None
    bytes_threshold_high: int = -1
    bytes_threshold_low: int = -1
    messages_threshold_high: int = -1
    messages_threshold_low: int = -1
    expiration_policy: str = "discard"
    expiration_logging_policy: str | None = None
    messages_limit_override: int = -1
    consumer_flow_limit: int = -1
    default_unit_of_order: bool = False

    def thresholds(self) -> Thresholds:
        return Thresholds(
            self.bytes_threshold_high,
            self.bytes_threshold_low,
            self.messages_threshold_high,
            self.messages_threshold_low,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DestinationSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}).checked()

    def updated(self, **changes: Any) -> DestinationSettings:
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise InvalidArgumentError(f"unknown destination setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes).checked()

    def checked(self) -> DestinationSettings:
        if not isinstance(self.order, str):
            raise TypeError(f"order is a str, not {type(self.order).__name__}")
        # The pager's own parse: a bad order is refused before the record is written.
        check_order(self.order)
        for name in ("redelivery_delay", "redelivery_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} is an int, not {type(value).__name__}")
        if not 0 <= self.redelivery_delay <= 1 << 40:
            raise InvalidArgumentError(f"redelivery_delay must be within 0..2**40 ms, not {self.redelivery_delay}")
        if not -1 <= self.redelivery_limit <= 1 << 31:
            raise InvalidArgumentError(f"redelivery_limit must be -1 (no limit) or more, not {self.redelivery_limit}")
        if self.error_destination is not None:
            check_name("error destination", self.error_destination)
        if self.quota is not None:
            check_name("quota", self.quota)
        self.thresholds()  # checks them
        if self.expiration_policy not in EXPIRATION_POLICIES:
            raise InvalidArgumentError(
                f"expiration_policy must be one of {', '.join(EXPIRATION_POLICIES)}, not {self.expiration_policy!r}"
            )
        if self.expiration_policy == "redirect" and self.error_destination is None:
            raise InvalidArgumentError("expiration_policy 'redirect' needs an error_destination")
        parse_logging_policy(self.expiration_logging_policy)  # checks it
        limit = self.messages_limit_override
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"messages_limit_override is an int, not {type(limit).__name__}")
        if limit != -1 and not 1 <= limit <= 1 << 40:
            raise InvalidArgumentError(f"messages_limit_override must be -1 (no limit) or 1 or more, not {limit}")
        flow = self.consumer_flow_limit
        if isinstance(flow, bool) or not isinstance(flow, int):
            raise TypeError(f"consumer_flow_limit is an int, not {type(flow).__name__}")
        if flow != -1 and not 1 <= flow <= 1_000_000:
            raise InvalidArgumentError(f"consumer_flow_limit must be -1 (none) or within 1..1000000, not {flow}")
        if not isinstance(self.default_unit_of_order, bool):
            raise TypeError(f"default_unit_of_order is a bool, not {type(self.default_unit_of_order).__name__}")
        return self


def default_unit_name(destination: str) -> str:
    """The unit of order a destination with ``default_unit_of_order`` puts
    messages without one in (WebLogic generates one name per destination)."""
    return f"jmsstore.default:{destination}"
