"""The JMS types of message properties over STOMP, where every header is text.

STOMP carries a message's properties as headers, so a ``long``, ``double``
or ``boolean`` property arrives as a string at a plain STOMP client, as with
ActiveMQ. jmsstore's server and remote client also write one more header,
``jmsstore.property-types``, naming the type of each property that is not a
string (``count:long,price:double,urgent:boolean``), and read the values
back as those types. Other clients see an extra header and the strings;
another broker that passes headers through (ActiveMQ keeps them as string
properties) keeps the types for jmsstore's clients too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

__all__ = ["PROPERTY_TYPES_HEADER", "PropertyTypeError", "header_text", "property_types", "typed"]

PROPERTY_TYPES_HEADER = "jmsstore.property-types"

# The JMS type names, and how the value of each is written as header text.
_LONG, _DOUBLE, _BOOLEAN = "long", "double", "boolean"
# Java's Long.parseLong and Double.parseDouble forms (Python's int() and float() also take "1_000" and blanks).
_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Infinity|NaN")


class PropertyTypeError(ValueError):
    """A ``jmsstore.property-types`` header, or a value it types, that cannot be read."""


def header_text(value: object) -> str:
    """A property's value as header text (``true``/``false`` for booleans,
    Java's ``Infinity``/``NaN`` spellings for doubles)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    return str(value)


def property_types(properties: Mapping[str, object]) -> str | None:
    """The ``jmsstore.property-types`` header for ``properties`` (None when
    all are strings)."""
    named = []
    for name, value in properties.items():
        if isinstance(value, bool):
            named.append(f"{name}:{_BOOLEAN}")
        elif isinstance(value, int):
            named.append(f"{name}:{_LONG}")
        elif isinstance(value, float):
            named.append(f"{name}:{_DOUBLE}")
    return ",".join(named) if named else None


def typed(header: str, values: Mapping[str, str]) -> dict[str, bool | int | float]:
    """The properties ``header`` types, read from their text in ``values``;
    :class:`PropertyTypeError` for a malformed header, a type it does not
    know, a property it names that is missing, or a value not of its type."""
    out: dict[str, bool | int | float] = {}
    for entry in header.split(","):
        name, colon, kind = entry.partition(":")
        if not colon or not name:
            raise PropertyTypeError(f"{entry[:60]!r} is not NAME:TYPE")
        text = values.get(name)
        if text is None:
            raise PropertyTypeError(f"it types {name[:60]!r}, which the frame does not carry")
        out[name] = _value(name, kind, text)
    return out


def _value(name: str, kind: str, text: str) -> bool | int | float:
    if kind == _BOOLEAN:
        if text not in ("true", "false"):
            raise PropertyTypeError(f"property {name[:60]!r} is typed boolean, and {text[:40]!r} is not true or false")
        return text == "true"
    if kind == _LONG:
        if not _LONG_TEXT.fullmatch(text):
            raise PropertyTypeError(f"property {name[:60]!r} is typed long, and {text[:40]!r} is not one")
        number = int(text)
        if not -(1 << 63) <= number < 1 << 63:
            raise PropertyTypeError(f"property {name[:60]!r} is typed long, and {text[:40]!r} is out of its range")
        return number
    if kind == _DOUBLE:
        if not _DOUBLE_TEXT.fullmatch(text):
            raise PropertyTypeError(f"property {name[:60]!r} is typed double, and {text[:40]!r} is not one")
        return float(text)
    raise PropertyTypeError(f"property {name[:60]!r} has type {kind[:20]!r}: the types are long, double and boolean")
