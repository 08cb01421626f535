"""How STOMP frames map to JMS messages and destinations, as ActiveMQ
Classic maps them, so that clients written for ActiveMQ work unchanged.

Destinations: ``/queue/NAME`` is a :class:`~jmsstore.Queue`,
``/topic/NAME`` a :class:`~jmsstore.Topic`, ``/temp-queue/NAME`` a
temporary queue, as ActiveMQ has them: the connection that names
``/temp-queue/NAME`` (in a SUBSCRIBE, a SEND or a ``reply-to``) gets a
temporary queue of its own, which only it may subscribe to and which is
deleted, with its messages, when it closes; MESSAGE frames carry that
queue's server-wide name in ``reply-to`` as
``/remote-temp-queue/TEMP...``, to which any connection may SEND the
reply (an ERROR once the queue is gone).
``NAME`` follows jmsstore's naming rule (letters, digits, ``_ . $ - :``).

A SEND becomes:

- a :class:`~jmsstore.TextMessage` when it has no ``content-length``
  header, a :class:`~jmsstore.BytesMessage` when it has one (ActiveMQ's
  rule, whatever ``content-type`` says; stomp.py adds ``content-length``
  by default, so its sends arrive as bytes messages). A text message's
  body is UTF-8 unless ``content-type`` names another ``charset`` (such
  as ``text/plain;charset=iso-8859-1``), as STOMP 1.2 has it; a charset
  the server does not know, or a body that is not valid in it, gets an
  ERROR frame naming it. (Without ``content-length`` a body ends at its
  first NUL octet, so UTF-16 and UTF-32 text needs ``content-length``,
  and then arrives as bytes.) Delivered, every text message is UTF-8
  again (``content-type:text/plain;charset=utf-8``);
- persistent only with ``persistent:true`` (ActiveMQ's default for STOMP
  is non-persistent);
- ``priority`` (0-9, default 4), ``expires`` (absolute epoch milliseconds,
  0 or absent: never), ``type``, ``correlation-id`` and ``reply-to`` as the
  JMS headers;
- every other header a string property, when its name is a JMS property
  name (a Java identifier outside the ``JMS`` namespace); headers whose
  names are not (``content-type``, ``x-trace-id``) are not kept. A
  ``jmsstore.property-types`` header (:mod:`jmsstore.net.stomp.types`)
  makes the properties it names ``long``, ``double`` or ``boolean``.

A delivered message becomes a MESSAGE frame with ``subscription``,
``message-id``, ``destination``, ``ack``, ``content-length``, ``expires``,
``priority``, ``timestamp``, ``redelivered``, ``persistent`` (when it is),
``type``, ``correlation-id`` and ``reply-to`` (when set), and its
properties as headers (booleans as ``true``/``false``, with
``jmsstore.property-types`` naming the types of those not strings). A text message's
frame says ``content-type:text/plain;charset=utf-8``: every MESSAGE has a
``content-length`` (its body may hold NULs), so that is how a client tells
text from bytes (jmsstore's remote client does).
"""

from __future__ import annotations

import codecs
import contextlib
import re
from dataclasses import dataclass

from jmsstore._native import STOMP_NOT_PROPERTIES
from jmsstore.errors import InvalidArgumentError, JmsStoreError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic
from jmsstore.jms.message import (
    GROUP_ID,
    UNIT_OF_ORDER,
    BytesMessage,
    DeliveryMode,
    Message,
    TextMessage,
    check_property_name,
)
from jmsstore.net.stomp.frames import Command, Frame
from jmsstore.net.stomp.types import PROPERTY_TYPES_HEADER, PropertyTypeError, header_text, property_types, typed

__all__ = [
    "EXTENSIONS_HEADER",
    "RECALL_EXTENSION",
    "RECALL_HEADER",
    "REMOTE_TEMP_QUEUE",
    "TEXT_CONTENT_TYPE",
    "UNSEEN_HEADER",
    "Outgoing",
    "ProtocolError",
    "destination_name",
    "message_body",
    "message_frame",
    "message_headers",
    "outgoing_message",
    "parse_destination",
]


# The content-type of a text message's MESSAGE frame.
TEXT_CONTENT_TYPE = "text/plain;charset=utf-8"

# A NACK with this header set to ``true`` returns a message the client's
# application never had (it was ahead in the client's buffer): jmsstore's
# extension, so that such a message goes back as a JMS consumer's
# prefetched ones do, its delivery count unchanged and not flagged redelivered.
# On UNSUBSCRIBE it says the same of every message of the subscription still
# unacknowledged, including those still on the wire to the client.
UNSEEN_HEADER = "jmsstore.unseen"

# A NACK with this header set to ``true`` also returns, as never delivered,
# every other message of its subscription still unacknowledged (jmsstore's
# extension, sent by jmsstore's client after a recover). The subscription's
# MESSAGE frames after it carry the header too, with the count of recalls
# served; the client drops a frame marked with fewer recalls than it asked
# for (it was on the wire, and is back on the destination), so that the
# recovered messages come back before the later ones.
RECALL_HEADER = "jmsstore.recall"

# CONNECTED's list of the extensions above that the server understands
# (``jmsstore.unseen`` goes without saying: a server that ignores it only
# returns the messages flagged redelivered).
EXTENSIONS_HEADER = "jmsstore.extensions"
RECALL_EXTENSION = "recall"


# How a MESSAGE frame names a temporary queue (ActiveMQ's form): the
# server-wide name, to which any connection may send; /temp-queue/NAME is
# always the sending connection's own.
REMOTE_TEMP_QUEUE = "/remote-temp-queue/"


class ProtocolError(JmsStoreError):
    """A frame breaks the STOMP protocol or asks what the server refuses;
    the message is the ERROR frame's ``message`` header."""


_PREFIXES: dict[str, type[Destination]] = {
    "/queue/": Queue,
    "/topic/": Topic,
    "/temp-queue/": TemporaryQueue,
    REMOTE_TEMP_QUEUE: TemporaryQueue,
}

# SEND headers that are STOMP's or JMS headers, never properties (one list,
# the core's: its native sends map a SEND as this module does).
_NOT_PROPERTIES = frozenset(STOMP_NOT_PROPERTIES)


def parse_destination(text: str | None, *, temporary: bool = False) -> Destination:
    """The destination a STOMP ``destination`` (or ``reply-to``) header names."""
    if text is None:
        raise ProtocolError("the frame has no destination header")
    for prefix, kind in _PREFIXES.items():
        if text.startswith(prefix):
            if kind is TemporaryQueue and not temporary:
                break
            try:
                return kind(text[len(prefix) :])
            except InvalidArgumentError as e:
                raise ProtocolError(f"destination {text!r}: {e}") from None
    allowed = "/queue/NAME, /topic/NAME" + (" or /temp-queue/NAME" if temporary else "")
    if temporary and text.startswith(REMOTE_TEMP_QUEUE):
        allowed = "/remote-temp-queue/NAME with a valid NAME"
    raise ProtocolError(f"destination {text!r} is not {allowed}")


def destination_name(destination: Destination) -> str:
    """The STOMP name of a destination: ``/queue/NAME`` or ``/topic/NAME``."""
    return f"/{destination.kind}/{destination.name}"


@dataclass(slots=True)
class Outgoing:
    """A SEND, as the arguments of a JMS send."""

    message: Message
    destination: Destination
    mode: int
    priority: int
    ttl: int
    # STOMP's expires (absolute ms since the epoch), for the stamp to use as
    # it is: None without one (or expires:0, never).
    expiration: int | None = None


# A STOMP number: ASCII digits, optionally negative (str.isdigit also takes
# "²", and int() also takes "--5"'s cousins "+5", "5_0" and " 5").
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _integer(name: str, text: str, low: int, high: int) -> int:
    if not _INTEGER.fullmatch(text):
        raise ProtocolError(f"header {name} must be a whole number, not {text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise ProtocolError(f"header {name} must be within {low}..{high}, not {value}")
    return value


def _charset(content_type: str | None) -> str:
    """The charset a SEND's ``content-type`` names for its text (UTF-8 when
    it names none), as Python calls it; ``ProtocolError`` for one Python
    does not know."""
    if content_type is None:
        return "utf-8"
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"')
            try:
                name = codecs.lookup(charset).name
                # A text encoding: not a bytes-to-bytes codec such as zlib (LookupError),
                # nor Python's "undefined", which decodes nothing (UnicodeError).
                with contextlib.suppress(UnicodeDecodeError):
                    b"a".decode(name)
                return name
            except (LookupError, ValueError):  # ValueError: a name codecs cannot even look up (a NUL)
                raise ProtocolError(
                    f"content-type {content_type[:80]!r}: charset {charset[:40]!r} is not one the server knows "
                    "(send the text as utf-8, or with content-length as bytes)"
                ) from None
    return "utf-8"


def outgoing_message(headers: dict[str, str], body: bytes, now_ms: int) -> Outgoing:
    """The message a SEND frame (its headers, first occurrence of each, and
    body) sends, as ActiveMQ maps it (see the module documentation)."""
    destination = parse_destination(headers.get("destination"), temporary=True)
    message: Message
    if "content-length" in headers:
        message = BytesMessage(body)
    else:
        charset = _charset(headers.get("content-type"))
        try:
            message = TextMessage(body.decode(charset))
        except UnicodeError as e:  # some decoders (idna, punycode) raise a bare UnicodeError, with no position
            where = f" (at byte {e.start})" if isinstance(e, UnicodeDecodeError) else ""
            raise ProtocolError(
                f"a SEND without content-length is a text message, and its body is not {charset}{where}"
            ) from None
    persistent = headers.get("persistent", "false").lower() == "true"
    priority = _integer("priority", headers["priority"], 0, 9) if "priority" in headers else 4
    ttl, expiration = 0, None
    if "expires" in headers:
        expires = _integer("expires", headers["expires"], 0, 1 << 62)
        # Already past: one millisecond, so that it expires rather than lives forever.
        ttl = 0 if expires == 0 else max(1, expires - now_ms)
        expiration = expires or None
    message.type = headers.get("type")
    message.correlation_id = headers.get("correlation-id")
    reply_to = headers.get("reply-to")
    if reply_to is not None:
        message.reply_to = parse_destination(reply_to, temporary=True)
    types = headers.get(PROPERTY_TYPES_HEADER)
    try:
        typed_values = typed(types, headers) if types is not None else {}
    except PropertyTypeError as e:
        raise ProtocolError(f"header {PROPERTY_TYPES_HEADER}: {e}") from None
    for name in (UNIT_OF_ORDER, GROUP_ID):
        if name in typed_values:
            # A unit of order or a group is named by text: the broker refuses anything else.
            raise ProtocolError(f"header {PROPERTY_TYPES_HEADER}: property {name} names a unit of order, a string")
    for name, value in headers.items():
        if name in _NOT_PROPERTIES:
            continue
        try:
            check_property_name(name)
        except JmsStoreError:
            continue  # not a JMS property name: ActiveMQ's JMS clients could not read it either
        message.set_property(name, typed_values.get(name, value))
    mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
    return Outgoing(message, destination, int(mode), priority, ttl, expiration)


def message_headers(message: Message, subscription: str, ack: str) -> list[tuple[str, str]]:
    """The headers of the MESSAGE frame that delivers ``message`` (without
    ``content-length``); ``destination`` is the third."""
    headers = [
        ("subscription", subscription),
        ("message-id", message.message_id or ""),
        ("destination", destination_name(message.destination)),
        ("ack", ack),
        ("expires", str(message.expiration)),
        ("priority", str(message.priority)),
        ("timestamp", str(message.timestamp)),
        ("redelivered", "true" if message.redelivered else "false"),
    ]
    if message.delivery_mode == DeliveryMode.PERSISTENT:
        headers.append(("persistent", "true"))
    if message.type is not None:
        headers.append(("type", message.type))
    if message.correlation_id is not None:
        headers.append(("correlation-id", message.correlation_id))
    if isinstance(message.reply_to, TemporaryQueue):
        headers.append(("reply-to", f"{REMOTE_TEMP_QUEUE}{message.reply_to.name}"))
    elif isinstance(message.reply_to, Destination):
        headers.append(("reply-to", destination_name(message.reply_to)))
    if isinstance(message, TextMessage):
        headers.append(("content-type", TEXT_CONTENT_TYPE))
    properties = message.properties
    headers.extend((name, header_text(value)) for name, value in properties.items())
    types = property_types(properties)
    if types is not None:
        headers.append((PROPERTY_TYPES_HEADER, types))
    return headers


def message_body(message: Message) -> bytes:
    """The MESSAGE body: a text message's text as UTF-8, a bytes message's
    bytes; other message types (map, stream) have no STOMP form and go as
    an empty body."""
    if isinstance(message, TextMessage):
        return (message.text or "").encode("utf-8", "surrogatepass")
    if isinstance(message, BytesMessage):
        return message.body
    return b""


def message_frame(
    message: Message, subscription: str, ack: str, destination: str | None = None, recalls: int = 0
) -> Frame:
    """The MESSAGE frame that delivers ``message``: :func:`message_headers`
    (``destination`` in place of the message's own, if given), the
    ``jmsstore.recall`` count when not 0, and a ``content-length``. The
    STOMP dispatcher writes the common case natively, header for header
    as this does (``jmsstore._native.encode_message_frames``)."""
    headers = message_headers(message, subscription, ack)
    if destination is not None:
        headers[2] = ("destination", destination)
    if recalls:
        headers.append((RECALL_HEADER, str(recalls)))
    body = message_body(message)
    headers.append(("content-length", str(len(body))))
    return Frame(Command.MESSAGE, headers, body)
