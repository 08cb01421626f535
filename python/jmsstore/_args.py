"""Argument checks shared by the Python API: wrong types raise TypeError,
out-of-range values the library's own typed errors."""

from __future__ import annotations

from jmsstore.errors import InvalidArgumentError, UnknownHandleError

U64_MAX = (1 << 64) - 1


def integer(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int within ``low..high`` (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be within {low}..{high}, not {value}")
    return value


def handle(value: object, what: str = "handle") -> int:
    """A store handle or pager key: an int; out of range means it names nothing."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a {what} is an int, not {type(value).__name__}")
    if not 0 <= value <= U64_MAX:
        raise UnknownHandleError(f"unknown {what} {value}")
    return value
