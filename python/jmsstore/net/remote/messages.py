"""JMS messages as STOMP frames on the client's side: a send becomes a
SEND frame, a MESSAGE frame the message a consumer hands out.

Both follow ActiveMQ Classic's mapping, the one the server uses
(:mod:`jmsstore.net.stomp.mapping`): a text message goes without
``content-length``, a bytes message with it (a MESSAGE with a
``content-length`` is text too when its ``content-type`` is ``text/...``); ``persistent``, ``priority``,
``expires`` (absolute epoch ms), ``type``, ``correlation-id`` and
``reply-to`` carry the JMS headers; properties travel as headers, with
``jmsstore.property-types`` naming the type of each that is not a string
(:mod:`jmsstore.net.stomp.types`), so that they come back as they were sent
(from a broker that drops that header, as strings). Map and stream messages
have no STOMP form.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from jmsstore.errors import JmsStoreError, MessageFormatError
from jmsstore.jms.destination import Destination, TemporaryQueue
from jmsstore.jms.message import BytesMessage, DeliveryMode, Message, TextMessage, delivered, unit_of_order
from jmsstore.net.remote.errors import StompServerError, UnsupportedOverStompError
from jmsstore.net.stomp.frames import Command, Frame
from jmsstore.net.stomp.mapping import REMOTE_TEMP_QUEUE, destination_name, outgoing_message
from jmsstore.net.stomp.types import PROPERTY_TYPES_HEADER, PropertyTypeError, header_text, property_types, typed

__all__ = ["received_message", "send_frame", "stomp_destination"]

# Header names STOMP or the JMS mapping use on SEND and MESSAGE frames: a
# property of that name would be read as the header, or dropped.
_RESERVED = frozenset(
    {"destination", "receipt", "transaction", "persistent", "priority", "expires", "type"}
    | {"subscription", "ack", "timestamp", "redelivered", "id"}
)


def stomp_destination(destination: Destination, own: Container[str] = ()) -> str:
    """``/queue/NAME`` or ``/topic/NAME``; a temporary queue is
    ``/temp-queue/NAME`` when its name is in ``own`` (the connection's
    own, as it created them), else ``/remote-temp-queue/NAME``: the
    server-wide name another connection's temporary queue came with in a
    ``reply-to``, as jmsstore serve and ActiveMQ name it."""
    if isinstance(destination, TemporaryQueue):
        if destination.name in own:
            return f"/temp-queue/{destination.name}"
        return f"{REMOTE_TEMP_QUEUE}{destination.name}"
    return destination_name(destination)


def _check_header_text(what: str, text: str) -> None:
    """Raises unless ``text`` can travel in a STOMP header: before anything is
    sent, so that the connection goes on."""
    if "\x00" in text:
        raise UnsupportedOverStompError(f"{what} holds a NUL character, which has no STOMP form (a header cannot)")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MessageFormatError(f"{what} is not valid UTF-8 (a lone surrogate at index {e.start})") from None


def send_frame(
    message: Message,
    destination: Destination,
    mode: int,
    priority: int,
    ttl: int,
    now_ms: int,
    own_temporary: Container[str] = (),
    *,
    expiration: int | None = None,
) -> Frame:
    """The SEND frame of a send (without ``receipt`` or ``transaction``);
    stamps the message's JMS headers as a send does, but for ``message_id``:
    the server gives it, and tells it in the SEND's RECEIPT if it is
    jmsstore's (a ``message-id`` header there; other servers do not).
    A header value STOMP cannot carry (a type, correlation id or property
    holding a NUL) raises :class:`UnsupportedOverStompError`, one that is
    not valid Unicode text (a lone surrogate) ``MessageFormatError``.
    ``expiration`` (absolute ms) stands for ``ttl`` when given. A unit of
    order that names none raises as an embedded send does (``TypeError`` for
    a ``JMS_BEA_UnitOfOrder`` that is not a str), before anything is sent."""
    unit_of_order(message)
    headers = [
        ("destination", stomp_destination(destination, own_temporary)),
        ("persistent", "true" if mode == DeliveryMode.PERSISTENT else "false"),
        ("priority", str(priority)),
    ]
    if expiration is None:
        expiration = now_ms + ttl if ttl else 0
    if expiration:
        headers.append(("expires", str(expiration)))
    if message.type is not None:
        _check_header_text("the message's type", message.type)
        headers.append(("type", message.type))
    if message.correlation_id is not None:
        _check_header_text("the message's correlation_id", message.correlation_id)
        headers.append(("correlation-id", message.correlation_id))
    if isinstance(message.reply_to, Destination):
        headers.append(("reply-to", stomp_destination(message.reply_to, own_temporary)))
    properties = message.properties
    for name, value in properties.items():
        if name in _RESERVED:
            raise UnsupportedOverStompError(f"property {name!r} has no STOMP form: {name} is a STOMP header")
        text = header_text(value)
        _check_header_text(f"property {name!r}", name)
        _check_header_text(f"the value of property {name!r}", text)
        headers.append((name, text))
    types = property_types(properties)
    if types is not None:
        headers.append((PROPERTY_TYPES_HEADER, types))
    if isinstance(message, TextMessage):
        try:
            body = (message.text or "").encode("utf-8")
        except UnicodeEncodeError as e:
            raise MessageFormatError(f"a text message's text is not valid UTF-8 (at index {e.start})") from None
        if b"\x00" in body:
            # Without content-length a NUL would end the frame; with it the message would be a bytes message.
            raise UnsupportedOverStompError("a text message holding a NUL character has no STOMP form")
    elif isinstance(message, BytesMessage):
        body = message.body
        headers.append(("content-length", str(len(body))))
    elif type(message) is Message:
        body = b""  # no body: it arrives as an empty text message
    else:
        raise UnsupportedOverStompError(f"a {type(message).__name__} has no STOMP form; send text or bytes")
    message.destination = destination
    message.delivery_mode = DeliveryMode(mode)
    message.priority = priority
    message.timestamp = now_ms
    message.expiration = expiration
    message.message_id = None
    return Frame(Command.SEND, headers, body)


def received_message(
    frame: Frame, destination: Destination, acknowledge: Callable[[], None] | None, now_ms: int
) -> Message:
    """The message of a MESSAGE frame, as a consumer of ``destination``
    hands it out: read-only, ``acknowledge`` behind :meth:`Message.acknowledge`."""
    headers = frame.header_map()
    if (headers.get("content-type") or "").startswith("text/"):
        # A text message with a content-length (jmsstore's server sends one on every MESSAGE).
        headers.pop("content-length", None)
    try:
        carried = outgoing_message(headers, frame.body, now_ms)
        message = carried.message
        message.priority = carried.priority
        message.message_id = headers.get("message-id")
        message.timestamp = int(headers.get("timestamp", "0") or 0)
        message.expiration = int(headers.get("expires", "0") or 0)
    except (JmsStoreError, ValueError) as e:
        raise StompServerError(f"a MESSAGE frame jmsstore cannot read: {e}") from None
    types = headers.get(PROPERTY_TYPES_HEADER)
    if types is not None:
        try:
            values = typed(types, headers)
        except PropertyTypeError:
            values = {}  # typed by someone else, or garbled on the way: the strings, as a plain client sees them
        kept = message.properties
        for name, value in values.items():
            if name in kept:
                message.set_property(name, value)
    message.delivery_mode = (
        DeliveryMode.PERSISTENT if headers.get("persistent", "").lower() == "true" else DeliveryMode.NON_PERSISTENT
    )
    redelivered = headers.get("redelivered", "false").lower() == "true"
    return delivered(
        message,
        delivery_count=2 if redelivered else 1,
        destination=destination,
        reply_to=message.reply_to,
        acknowledge=acknowledge,
    )
