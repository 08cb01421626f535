"""JMS messages: headers, typed properties and the four body types, and
their binary encoding (what the store and the pager hold).

Encoding (version 1, little-endian), one byte string per message::

    u8  version (1)        u8  body type (0 none, 1 text, 2 bytes, 3 map, 4 stream)
    u8  delivery mode      u8  priority
    u64 id                 i64 timestamp, expiration, delivery_time (ms since the epoch)
    str message_id, correlation_id, type, reply_to   (u32 length + UTF-8; 0xFFFFFFFF: none)
    u32 property count, then per property: str name, value
    body: text = str; bytes = the rest of the record; map = u32 count + (str, value)...;
          stream = u32 count + value...
    value: u8 tag, then N null | Z u8 bool | b i8 | s i16 | i i32 | l i64 | f f32 | d f64
           | S str | Y u32 length + bytes | c u16 (a Java char)

Reading the JMS types other than long, double, string and boolean is
supported (another producer, or an import, may have written them); Python
code writes ``int`` as long and ``float`` as double.
"""

from __future__ import annotations

import enum
import operator
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from typing import Any

from jmsstore import _native
from jmsstore._args import utf8
from jmsstore.errors import (
    InvalidArgumentError,
    MessageFormatError,
    MessageNotWriteableError,
)

__all__ = [
    "BytesMessage",
    "DeliveryMode",
    "MapMessage",
    "Message",
    "StreamMessage",
    "TextMessage",
    "check_unit_of_order",
    "decode",
    "decode_delivered",
    "delivered",
    "encode",
    "set_unit_of_order",
    "unit_of_order",
    "with_message_id",
]

FORMAT_VERSION = 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class DeliveryMode(enum.IntEnum):
    """JMS delivery modes (the numeric values are the JMS constants)."""

    NON_PERSISTENT = 1
    PERSISTENT = 2


# DeliveryMode(value) by lookup: the enum's call costs more than a send's encoding.
DELIVERY_MODES: dict[object, DeliveryMode] = {int(mode): mode for mode in DeliveryMode}


_RESERVED_WORDS = frozenset({"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"})


def check_property_name(name: object) -> str:
    """A valid property name (JMS 2.0 §3.5.1): a Java identifier, not a
    selector keyword, not in the reserved ``JMS`` namespace (``JMSX`` and
    ``JMS_`` are allowed)."""
    if not isinstance(name, str):
        raise MessageFormatError(f"a property name is a str, not {type(name).__name__}")
    if not name or not (name[0].isalpha() or name[0] in "_$") or not all(c.isalnum() or c in "_$" for c in name):
        raise InvalidArgumentError(f"property name {name!r} is not a Java identifier")
    if name.upper() in _RESERVED_WORDS:
        raise InvalidArgumentError(f"property name {name!r} is a reserved selector word")
    if name.startswith("JMS") and not name.startswith(("JMSX", "JMS_")):
        raise InvalidArgumentError(f"property name {name!r} is in the reserved JMS namespace")
    return name


# WebLogic's Unit-of-Order: the property naming a message's unit, and JMS's
# group property, read as the unit when a message has no unit of its own
# (the broker core reads the two the same way: format::validate).
UNIT_OF_ORDER = "JMS_BEA_UnitOfOrder"
GROUP_ID = "JMSXGroupID"
_UNIT_OF_ORDER_PROPERTY = f"property {UNIT_OF_ORDER}"


def check_unit_of_order(what: str, name: object) -> str | None:
    """``name`` if it can name a unit of order (a non-empty str that is valid text), or None."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError(f"{what} is a str or None, not {type(name).__name__}")
    if not name:
        raise InvalidArgumentError(f"{what} must not be empty")
    return utf8(what, name)


def unit_of_order(message: Message) -> str | None:
    """The unit of order a message belongs to: its ``JMS_BEA_UnitOfOrder``
    property, else its ``JMSXGroupID`` (a value that is not a non-empty str
    names none). A ``JMS_BEA_UnitOfOrder`` that cannot name a unit raises
    as :func:`check_unit_of_order` does, and so does a ``JMSXGroupID``
    that is not valid text (``InvalidArgumentError``)."""
    props = message._properties
    unit = props.get(UNIT_OF_ORDER)
    if unit is not None:
        return check_unit_of_order(_UNIT_OF_ORDER_PROPERTY, unit)
    group = props.get(GROUP_ID)
    if type(group) is not str or not group:
        return None
    return group if group.isascii() else utf8(GROUP_ID, group)


def set_unit_of_order(message: Message, name: str) -> None:
    """Puts a message in unit ``name`` (checked by :func:`check_unit_of_order`),
    as a send does: the provider sets the property even on a message whose
    properties are read-only to the application."""
    message._properties[UNIT_OF_ORDER] = name


def _check_property_value(name: str, value: object) -> object:
    if isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise MessageFormatError(f"property {name!r}: {value} does not fit a 64-bit long")
        return value
    raise MessageFormatError(
        f"property {name!r}: a property value is bool, int, float or str, not {type(value).__name__}"
    )


def _check_body_value(where: str, value: object) -> object:
    if value is None or isinstance(value, (bool, str, float, bytes)):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, int):
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise MessageFormatError(f"{where}: {value} does not fit a 64-bit long")
        return value
    raise MessageFormatError(f"{where}: a value is None, bool, int, float, str or bytes, not {type(value).__name__}")


class Message:
    """A JMS message without a body; the base of the other message types.

    Header attributes follow JMS: ``message_id``, ``timestamp`` (ms),
    ``correlation_id``, ``reply_to``, ``destination``, ``delivery_mode``,
    ``redelivered``, ``delivery_count`` (JMSXDeliveryCount), ``type``,
    ``priority``, ``expiration`` (ms, 0: never) and ``delivery_time`` (ms).
    The provider sets them on send; applications set ``correlation_id``,
    ``reply_to`` and ``type``.
    """

    BODY_TYPE = 0

    __slots__ = (
        "_delivery",
        "_properties",
        "_read_only",
        "_session",
        "correlation_id",
        "delivery_count",
        "delivery_mode",
        "delivery_time",
        "destination",
        "expiration",
        "id",
        "message_id",
        "priority",
        "redelivered",
        "reply_to",
        "timestamp",
        "type",
    )

    def __init__(self) -> None:
        self._properties: dict[str, object] = {}
        self._read_only = False
        self._session: Callable[[], None] | None = None  # CLIENT acknowledgement of its session
        self._delivery: object = None
        self.message_id: str | None = None
        self.timestamp = 0
        self.correlation_id: str | None = None
        self.reply_to: Any = None
        self.destination: Any = None
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.redelivered = False
        self.delivery_count = 0
        self.type: str | None = None
        self.priority = 4
        self.expiration = 0
        self.delivery_time = 0
        self.id = 0

    # ------------------------------------------------------------ properties

    def set_property(self, name: str, value: bool | int | float | str) -> None:
        """Sets a typed property (bool, int as a 64-bit long, float as a double, or str)."""
        if self._read_only:
            raise MessageNotWriteableError("a received message's properties are read-only; clear_properties() first")
        checked = check_property_name(name)
        self._properties[checked] = _check_property_value(checked, value)

    def get_property(self, name: str) -> bool | int | float | str | None:
        """The property's value, or None if it is not set."""
        if name == "JMSXDeliveryCount":
            return self.delivery_count or None  # set by the provider on delivery (JMS 2.0 §3.5.11)
        return self._properties.get(name)  # type: ignore[return-value]

    def property_exists(self, name: str) -> bool:
        """Whether ``get_property(name)`` has a value (every name of :meth:`property_names`)."""
        if name == "JMSXDeliveryCount":
            return self.delivery_count > 0
        return name in self._properties

    def property_names(self) -> list[str]:
        """The names of the properties set (JMSX properties the provider sets included)."""
        names = list(self._properties)
        if self.delivery_count:
            names.append("JMSXDeliveryCount")
        return names

    @property
    def properties(self) -> Mapping[str, object]:
        """A read-only view of the properties."""
        return dict(self._properties)

    def clear_properties(self) -> None:
        """Removes every property and makes them writable again."""
        self._properties = {}
        self._read_only = False

    def clear_body(self) -> None:
        """Empties the body and makes it writable."""
        self._read_only = False

    # ------------------------------------------------------------ acknowledgement

    def acknowledge(self) -> None:
        """CLIENT_ACKNOWLEDGE: acknowledges every message the session has
        delivered so far (JMS 2.0 §6.2.10); a no-op in other modes."""
        acknowledge = self._session
        if acknowledge is None:
            return
        acknowledge()

    # ------------------------------------------------------------ for selectors

    def selector_headers(self) -> dict[str, object]:
        """The header values selectors see (JMS 2.0 §3.8.1.1)."""
        return {
            "JMSDeliveryMode": "PERSISTENT" if self.delivery_mode == DeliveryMode.PERSISTENT else "NON_PERSISTENT",
            "JMSPriority": self.priority,
            "JMSMessageID": self.message_id,
            "JMSTimestamp": self.timestamp,
            "JMSCorrelationID": self.correlation_id,
            "JMSType": self.type,
            "JMSRedelivered": self.redelivered,
            "JMSDeliveryTime": self.delivery_time,
            "JMSExpiration": self.expiration,
        }

    def _body_equal(self, other: Message) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, Message)
            and self.message_id == other.message_id
            and self._properties == other._properties
            and self._body_equal(other)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(message_id={self.message_id!r}, priority={self.priority})"

    def _check_writable(self) -> None:
        if self._read_only:
            raise MessageNotWriteableError("a received message's body is read-only; clear_body() first")


class TextMessage(Message):
    """A message whose body is a string (``text``)."""

    BODY_TYPE = 1
    __slots__ = ("_text",)

    def __init__(self, text: str | None = None) -> None:
        super().__init__()
        if text is not None and not isinstance(text, str):
            raise MessageFormatError(f"a TextMessage's text is a str, not {type(text).__name__}")
        self._text = text

    @property
    def text(self) -> str | None:
        return self._text

    @text.setter
    def text(self, value: str | None) -> None:
        self._check_writable()
        if value is not None and not isinstance(value, str):
            raise MessageFormatError(f"a TextMessage's text is a str, not {type(value).__name__}")
        self._text = value

    def clear_body(self) -> None:
        super().clear_body()
        self._text = None

    def _body_equal(self, other: Message) -> bool:
        return isinstance(other, TextMessage) and self._text == other._text


class BytesMessage(Message):
    """A message whose body is bytes (``body``)."""

    BODY_TYPE = 2
    __slots__ = ("_body",)

    def __init__(self, body: bytes | bytearray | memoryview = b"") -> None:
        super().__init__()
        self._body = body if type(body) is bytes else _bytes(body)

    @property
    def body(self) -> bytes:
        return self._body

    @body.setter
    def body(self, value: bytes) -> None:
        self._check_writable()
        self._body = _bytes(value)

    def clear_body(self) -> None:
        super().clear_body()
        self._body = b""

    def _body_equal(self, other: Message) -> bool:
        return isinstance(other, BytesMessage) and self._body == other._body


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise MessageFormatError(f"a BytesMessage's body is bytes, not {type(value).__name__}")


class MapMessage(Message, MutableMapping[str, object]):
    """A message whose body maps names to values (None, bool, int, float, str, bytes)."""

    BODY_TYPE = 3
    __slots__ = ("_map",)

    def __init__(self, mapping: Mapping[str, object] | None = None) -> None:
        super().__init__()
        self._map: dict[str, object] = {}
        for key, value in (mapping or {}).items():
            self._set(key, value)

    def _set(self, key: object, value: object) -> None:
        if not isinstance(key, str) or not key:
            raise MessageFormatError(f"a MapMessage key is a non-empty str, not {key!r}")
        self._map[key] = _check_body_value(f"map entry {key!r}", value)

    def __getitem__(self, key: str) -> object:
        return self._map[key]

    def __setitem__(self, key: str, value: object) -> None:
        self._check_writable()
        self._set(key, value)

    def __delitem__(self, key: str) -> None:
        self._check_writable()
        del self._map[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def clear_body(self) -> None:
        super().clear_body()
        self._map = {}

    def _body_equal(self, other: Message) -> bool:
        return isinstance(other, MapMessage) and self._map == other._map

    __eq__ = Message.__eq__
    __hash__ = None  # type: ignore[assignment]


class StreamMessage(Message):
    """A message whose body is a sequence of typed values, written with
    :meth:`write` and read back in order with :meth:`read`."""

    BODY_TYPE = 4
    __slots__ = ("_position", "_values")

    def __init__(self, values: Iterable[object] = ()) -> None:
        super().__init__()
        self._values: list[object] = []
        self._position = 0
        for value in values:
            self._values.append(_check_body_value("stream value", value))

    @property
    def values(self) -> list[object]:
        """A copy of the values."""
        return list(self._values)

    def write(self, value: object) -> None:
        self._check_writable()
        self._values.append(_check_body_value("stream value", value))

    def read(self) -> object:
        """The next value; raises :class:`EOFError` at the end (JMS MessageEOFException)."""
        if self._position >= len(self._values):
            raise EOFError("no more values in the stream message")
        value = self._values[self._position]
        self._position += 1
        return value

    def reset(self) -> None:
        """Reads from the first value again."""
        self._position = 0

    def clear_body(self) -> None:
        super().clear_body()
        self._values = []
        self._position = 0

    def _body_equal(self, other: Message) -> bool:
        return isinstance(other, StreamMessage) and self._values == other._values


_TYPES: dict[int, type[Message]] = {
    cls.BODY_TYPE: cls for cls in (Message, TextMessage, BytesMessage, MapMessage, StreamMessage)
}
_BYTES_BODY, _TEXT_BODY = BytesMessage.BODY_TYPE, TextMessage.BODY_TYPE

# ---------------------------------------------------------------- encoding

_FIXED = struct.Struct("<BBBBQqqq")
_U32 = struct.Struct("<I")
_NONE = 0xFFFF_FFFF
_PACK_U32 = _U32.pack
_VALUE_STRUCTS = {
    ord("Z"): struct.Struct("<?"),
    ord("b"): struct.Struct("<b"),
    ord("s"): struct.Struct("<h"),
    ord("i"): struct.Struct("<i"),
    ord("l"): struct.Struct("<q"),
    ord("f"): struct.Struct("<f"),
    ord("d"): struct.Struct("<d"),
    ord("c"): struct.Struct("<H"),
}
_L = _VALUE_STRUCTS[ord("l")]
_D = _VALUE_STRUCTS[ord("d")]


def _put_str(out: list[bytes], value: str | None) -> None:
    if value is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        data = value.encode("utf-8", "surrogatepass")
        out.append(_PACK_U32(len(data)))
        out.append(data)


def _put_value(out: list[bytes], value: object) -> None:
    if value is None:
        out.append(b"N")
    elif value is True:
        out.append(b"Z\x01")
    elif value is False:
        out.append(b"Z\x00")
    elif isinstance(value, int):
        out.append(b"l" + _L.pack(value))
    elif isinstance(value, float):
        out.append(b"d" + _D.pack(value))
    elif isinstance(value, str):
        out.append(b"S")
        _put_str(out, value)
    elif isinstance(value, bytes):
        out.append(b"Y" + _PACK_U32(len(value)))
        out.append(value)
    else:  # checked on the way in
        raise MessageFormatError(f"cannot encode a {type(value).__name__}")


def destination_text(destination: object) -> str | None:
    """``kind:name`` of a destination (for reply_to), or None."""
    if destination is None:
        return None
    kind = getattr(destination, "kind", None)
    name = getattr(destination, "name", None)
    if not isinstance(kind, str) or not isinstance(name, str):
        raise MessageFormatError(f"reply_to is a Queue, Topic or TemporaryQueue, not {type(destination).__name__}")
    return f"{kind}:{name}"


# The attribute holding the body of each message class (None: no body), for
# the native writer; a subclass of these is written in Python.
_BODY_ATTRIBUTE: dict[type[Message], str | None] = {
    Message: None,
    TextMessage: "_text",
    BytesMessage: "_body",
    MapMessage: "_map",
    StreamMessage: "_values",
}


# The fixed-size header fields after the format version, in the order both
# writers write them: read in one C call (this runs per send).
_FIXED_FIELDS = operator.attrgetter(
    "BODY_TYPE", "delivery_mode", "priority", "id", "timestamp", "expiration", "delivery_time"
)


def encode(message: Message) -> bytes:
    """The message's bytes (see the module documentation): written natively,
    or by :func:`encode_in_python` where the native writer declines (a
    string that is not strict UTF-8, a value it would refuse)."""
    message_class = type(message)
    if message_class not in _BODY_ATTRIBUTE:
        return encode_in_python(message)  # a subclass: its body may be kept differently
    body_attribute = _BODY_ATTRIBUTE[message_class]
    reply_to = message.reply_to
    # One native call, no Python call between: this runs per send.
    data = _native.write_message(
        (FORMAT_VERSION, *_FIXED_FIELDS(message)),
        message.message_id,
        message.correlation_id,
        message.type,
        None if reply_to is None else destination_text(reply_to),
        message._properties,
        None if body_attribute is None else getattr(message, body_attribute),
    )
    return data if data is not None else encode_in_python(message)


def encode_in_python(message: Message) -> bytes:
    """The message's bytes, written in Python: the reference the native
    writer matches byte for byte, and where it declines."""
    out: list[bytes] = [_FIXED.pack(FORMAT_VERSION, *_FIXED_FIELDS(message))]
    _put_str(out, message.message_id)
    _put_str(out, message.correlation_id)
    _put_str(out, message.type)
    _put_str(out, destination_text(message.reply_to))
    props = message._properties
    out.append(_PACK_U32(len(props)))
    for name, value in props.items():
        _put_str(out, name)
        _put_value(out, value)
    if isinstance(message, TextMessage):
        _put_str(out, message._text)
    elif isinstance(message, BytesMessage):
        out.append(message._body)
    elif isinstance(message, MapMessage):
        out.append(_PACK_U32(len(message._map)))
        for key, value in message._map.items():
            _put_str(out, key)
            _put_value(out, value)
    elif isinstance(message, StreamMessage):
        out.append(_PACK_U32(len(message._values)))
        for value in message._values:
            _put_value(out, value)
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def u32(self) -> int:
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def str(self) -> str | None:
        n = self.u32()
        if n == _NONE:
            return None
        end = self.pos + n
        if end > len(self.data):
            raise MessageFormatError("truncated message: a string runs past the end")
        value = self.data[self.pos : end].decode("utf-8", "surrogatepass")
        self.pos = end
        return value

    def value(self) -> object:
        tag = self.data[self.pos]
        self.pos += 1
        if tag == 78:  # N
            return None
        if tag == 83:  # S
            return self.str()
        if tag == 89:  # Y
            n = self.u32()
            value = self.data[self.pos : self.pos + n]
            if len(value) != n:
                raise MessageFormatError("truncated message: bytes run past the end")
            self.pos += n
            return value
        fmt = _VALUE_STRUCTS.get(tag)
        if fmt is None:
            raise MessageFormatError(f"unknown value tag {tag!r}")
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return chr(value) if tag == 99 else value


def _header(data: bytes) -> tuple[tuple[Any, ...], _Reader]:
    if len(data) < _FIXED.size or data[0] != FORMAT_VERSION:
        version = data[0] if data else None
        raise MessageFormatError(f"not a jmsstore message of format version {FORMAT_VERSION} (starts with {version})")
    return _FIXED.unpack_from(data, 0), _Reader(data, _FIXED.size)


def with_message_id(data: bytes, message_id: str, ident: int) -> bytes:
    """``data`` (an encoded message without a message id) with ``message_id``
    and the broker's numeric ``ident`` set; every other byte is kept."""
    _header(data)
    if data[_FIXED.size : _FIXED.size + 4] != b"\xff\xff\xff\xff":
        raise MessageFormatError("the message already has a message id")
    text = message_id.encode("utf-8", "surrogatepass")
    ident_at = _FIXED.size - 32  # after the four u8 fields
    return b"".join(
        (
            data[:ident_at],
            struct.pack("<Q", ident),
            data[ident_at + 8 : _FIXED.size],
            _PACK_U32(len(text)),
            text,
            data[_FIXED.size + 4 :],
        )
    )


def delivered(
    message: Message,
    *,
    delivery_count: int,
    destination: object,
    reply_to: object,
    acknowledge: Callable[[], None] | None,
) -> Message:
    """Makes a decoded ``message`` what a consumer hands out (JMS 2.0
    §3.4): read-only, ``redelivered`` and ``delivery_count`` (JMSXDeliveryCount)
    from the delivery state, its ``destination`` and resolved ``reply_to``,
    and ``acknowledge`` for :meth:`Message.acknowledge` (CLIENT mode)."""
    message._read_only = True
    message.redelivered = delivery_count > 1
    message.delivery_count = delivery_count
    message.destination = destination
    message.reply_to = reply_to
    message._session = acknowledge
    return message


def decode(data: bytes) -> Message:
    """The message encoded in ``data``; ``reply_to`` is left as its ``kind:name`` text.

    Read natively in one call (a consumer decodes every message it hands
    out, holding the GIL); a message with a string that is not strict UTF-8
    (an encoded surrogate) is read by :func:`_read_in_python`."""
    try:
        fields = _native.read_message(data)
    except ValueError as e:
        raise MessageFormatError(str(e)) from None
    return _message(fields if fields is not None else _read_in_python(data))


def decode_delivered(
    data: bytes,
    delivery_count: int,
    destination: object,
    acknowledge: Callable[[], None] | None,
    reply_to: Callable[[object], object],
) -> Message:
    """:func:`decode` and :func:`delivered` in one: the message a consumer
    hands out (``reply_to`` maps the encoded ``kind:name`` to the
    destination the application sees)."""
    try:
        fields = _native.read_message(data)
    except ValueError as e:
        raise MessageFormatError(str(e)) from None
    message = _message(
        fields if fields is not None else _read_in_python(data), True, delivery_count, destination, acknowledge
    )
    if message.reply_to is not None:
        message.reply_to = reply_to(message.reply_to)
    return message


def _message(
    fields: tuple[Any, ...],
    read_only: bool = False,
    delivery_count: int = 0,
    destination: object = None,
    acknowledge: Callable[[], None] | None = None,
) -> Message:
    """The message of the fields :func:`_native.read_message` reads. With a
    ``delivery_count``, as a consumer hands it out (see :func:`delivered`),
    but for ``reply_to``, left as its encoded ``kind:name`` text."""
    (
        body_type,
        mode,
        priority,
        ident,
        timestamp,
        expiration,
        delivery_time,
        message_id,
        correlation_id,
        message_type,
        reply_to,
        properties,
        body,
    ) = fields
    delivery_mode = DELIVERY_MODES.get(mode)
    if delivery_mode is None:
        raise MessageFormatError(f"malformed message: {mode} is not a valid DeliveryMode")
    if not 0 <= priority <= 9:
        raise MessageFormatError(f"malformed message: priority {priority} is not within 0..9")
    cls = _TYPES[body_type]
    message = cls.__new__(cls)
    # Every slot, as Message.__init__ would, without setting each twice.
    message._properties = properties
    message._read_only = read_only
    message._session = acknowledge
    message._delivery = None
    message.destination = destination
    message.redelivered = delivery_count > 1
    message.delivery_count = delivery_count
    message.delivery_mode = delivery_mode
    message.priority = priority
    message.id = ident
    message.timestamp = timestamp
    message.expiration = expiration
    message.delivery_time = delivery_time
    message.message_id = message_id
    message.correlation_id = correlation_id
    message.type = message_type
    message.reply_to = reply_to
    if body_type == _BYTES_BODY:
        message._body = body  # type: ignore[attr-defined]
    elif body_type == _TEXT_BODY:
        message._text = body  # type: ignore[attr-defined]
    elif body_type == MapMessage.BODY_TYPE:
        message._map = body  # type: ignore[attr-defined]
    elif body_type == StreamMessage.BODY_TYPE:
        message._values = body  # type: ignore[attr-defined]
        message._position = 0  # type: ignore[attr-defined]
    return message


def _read_in_python(data: bytes) -> tuple[Any, ...]:
    """What :func:`_native.read_message` reads, in Python (strings may hold
    encoded surrogates, which strict UTF-8 refuses)."""
    try:
        fixed, r = _header(data)
        body_type = fixed[1]
        if body_type not in _TYPES:
            raise MessageFormatError(f"unknown body type {body_type}")
        message_id, correlation_id, message_type, reply_to = r.str(), r.str(), r.str(), r.str()
        properties: dict[str | None, object] = {}
        for _ in range(r.u32()):
            name = r.str()
            properties[name or ""] = r.value()
        body: object = None
        if body_type == TextMessage.BODY_TYPE:
            body = r.str()
        elif body_type == BytesMessage.BODY_TYPE:
            body = data[r.pos :]
        elif body_type == MapMessage.BODY_TYPE:
            entries: dict[str, object] = {}
            for _ in range(r.u32()):
                key = r.str()
                entries[key or ""] = r.value()
            body = entries
        elif body_type == StreamMessage.BODY_TYPE:
            body = [r.value() for _ in range(r.u32())]
        # The header's fields after its version, in read_message's order.
        return (*fixed[1:], message_id, correlation_id, message_type, reply_to, properties, body)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise MessageFormatError(f"malformed message: {e}") from e


def _decode_in_python(data: bytes) -> Message:
    """:func:`decode`, read in Python."""
    return _message(_read_in_python(data))
