"""Expiry: the reaper that removes expired messages (WebLogic's active
message expiration, every ``expiration_scan_interval`` seconds, and
passive expiry whenever consumers look), and the ``<ExpiredJMSMessage ...>``
lines of the ``log`` expiration policy.

The broker core removes the messages, as each destination's expiration
policy says (``discard``, ``log``, ``redirect`` to the error destination);
this module runs it on time and writes the log lines it hands back.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from jmsstore._native import NativeBroker
from jmsstore.errors import InvalidArgumentError, JmsStoreError
from jmsstore.jms.message import decode

__all__ = ["ExpiryReaper", "expired_message_log", "parse_logging_policy"]

log = logging.getLogger(__name__)
# Expired messages under the "log" expiration policy (WebLogic's <ExpiredJMSMessage> lines).
expiry_log = logging.getLogger("jmsstore.expiration")


_VALUE_LIMIT = 32
_CUT_TO = 30  # the seed's example: 'Any string longer than 32 char ...'


def _logged(value: object) -> str:
    """A value as the expiration log shows it: null, '' or the value in
    single quotes; longer than 32 characters, its first 30 and " ..."."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and math.isnan(value):
        text = "NaN"
    elif isinstance(value, bytes):
        text = value.hex()
    else:
        text = str(value)
    # "All string values are limited to 32 characters in length."
    if isinstance(value, str) and len(text) > _VALUE_LIMIT:
        text = text[:_CUT_TO] + " ..."
    return f"'{text}'"


HEADER_FIELDS = (
    "JMSDestination",
    "JMSDeliveryMode",
    "JMSExpiration",
    "JMSPriority",
    "JMSMessageID",
    "JMSTimestamp",
    "JMSCorrelationID",
    "JMSReplyTo",
    "JMSRedelivered",
    "JMSType",
    "JMSDeliveryTime",
)


def parse_logging_policy(policy: str | None) -> list[str]:
    """The fields an ``expiration_logging_policy`` names, in order
    (``%header%`` and ``%properties%`` kept as they are)."""
    if policy is None:
        return []
    if not isinstance(policy, str):
        raise TypeError(f"expiration_logging_policy is a str, not {type(policy).__name__}")
    names = [part.strip() for part in policy.split(",")]
    for name in names:
        if not name:
            if policy.strip():
                raise InvalidArgumentError(f"expiration_logging_policy {policy!r} has an empty field name")
            return []
        if name.startswith("%") and name not in ("%header%", "%properties%"):
            raise InvalidArgumentError(f"unknown expiration_logging_policy keyword {name!r} (%header% or %properties%)")
    return names


def expired_message_log(
    message_id: str,
    headers: Mapping[str, object],
    properties: Mapping[str, object],
    policy: Iterable[str],
) -> str:
    """The text WebLogic logs for an expired message (seed 000, "Expiration
    Log Output Format"). ``headers``: every JMS header field of the message
    by its JMS name; ``properties``: its user properties; ``policy``: the
    parsed ``expiration_logging_policy``. JMSMessageID is always there;
    fields that do not exist are left out, null ones shown as null."""
    header_names: list[str] = []
    property_names: list[str] = []
    for name in policy:
        if name == "%header%":
            header_names.extend(n for n in HEADER_FIELDS if n != "JMSMessageID")
        elif name == "%properties%":
            property_names.extend(sorted(properties))
        elif name in HEADER_FIELDS:
            if name != "JMSMessageID":
                header_names.append(name)
        else:
            property_names.append(name)
    header_parts = [f"{n}={_logged(headers[n])}" for n in dict.fromkeys(header_names) if n in headers]
    property_parts = [f"{n}={_logged(properties[n])}" for n in dict.fromkeys(property_names) if n in properties]
    opening = f"<ExpiredJMSMessage JMSMessageID='{message_id}'"
    if not header_parts and not property_parts:
        return opening + " />"
    lines = [opening + " >"]
    if header_parts:
        lines.append(" <HeaderFields " + " ".join(header_parts) + " />")
    if property_parts:
        lines.append(" <UserProperties " + " ".join(property_parts) + " />")
    lines.append("</ExpiredJMSMessage>")
    return "\n".join(lines)


def now_ms() -> int:
    """Milliseconds since the epoch (JMS header times)."""
    return time.time_ns() // 1_000_000


# What the reaper needs to log an expired message of a target: its
# destination's text ("queue://orders") and logging policy, by pager id.
LogContext = Callable[[int], tuple[str, str | None] | None]


class ExpiryReaper:
    """Removes expired messages: every ``interval`` seconds on its own
    thread (0: never), and on :meth:`sweep` (consumers looking, at most every
    100 ms). ``context(pager_id)`` tells where an expired message of the
    ``log`` policy was and how to log it."""

    BATCH = 10_000
    PASSIVE_EVERY_MS = 100
    now = staticmethod(now_ms)

    def __init__(self, native: NativeBroker, interval: float, context: LogContext) -> None:
        self._native = native
        self._context = context
        self.interval = interval
        self._last_sweep = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if interval > 0:
            self._thread = threading.Thread(target=self._scan, name="jmsstore-expiry", daemon=True)
            self._thread.start()

    def sweep(self, now: int) -> None:
        """Passive expiry: a consumer looking for messages removes the
        expired ones (at most every 100 ms), whether or not active scanning is on."""
        if now - self._last_sweep < self.PASSIVE_EVERY_MS:
            return
        self._last_sweep = now
        self.expire(now)

    def expire(self, now: int) -> None:
        """Removes the messages expired by ``now`` that no consumer holds."""
        for pager_id, body, redelivered in self._native.expire(now, self.BATCH):
            context = self._context(pager_id)
            if context is not None:
                self._log(body, redelivered, *context)

    def _scan(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.expire(now_ms())
            except JmsStoreError:
                if self._stop.is_set():
                    return
                log.exception("scanning for expired messages")

    @staticmethod
    def _log(body: bytes, redelivered: bool, where: str, policy: str | None) -> None:
        message = decode(body)
        headers = message.selector_headers()
        # Where it expired (the encoded message does not carry it), and the
        # delivery state the pager keeps.
        headers["JMSDestination"] = where
        headers["JMSRedelivered"] = redelivered
        reply_to = message.reply_to
        headers["JMSReplyTo"] = reply_to.replace(":", "://", 1) if isinstance(reply_to, str) else None
        expiry_log.info(
            expired_message_log(message.message_id or "", headers, message.properties, parse_logging_policy(policy))
        )

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
