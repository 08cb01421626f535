"""Argument checks shared by the Python API: wrong types raise TypeError,
out-of-range values the library's own typed errors."""

from __future__ import annotations

import math
import threading

from jmsstore.errors import InvalidArgumentError, UnknownHandleError

U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1


def count_limit(name: str, value: object) -> int:
    """A count or size limit: -1 (no limit) up to the largest the core's
    64-bit counters hold; past that ``InvalidArgumentError``, not the
    ``OverflowError`` the conversion would raise once it is stored."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not {type(value).__name__}")
    if not -1 <= value <= I64_MAX:
        raise InvalidArgumentError(f"{name} must be -1 (no limit) or more, up to {I64_MAX}, not {value}")
    return value


def integer(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int within ``low..high`` (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} is an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be within {low}..{high}, not {value}")
    return value


def utf8(what: str, value: str) -> str:
    """``value`` if it can be stored as UTF-8 text. A lone surrogate (which
    ``errors="surrogateescape"`` decoding leaves in a str) cannot:
    ``InvalidArgumentError`` rather than Python's ``UnicodeEncodeError``."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"{what} {value!r} is not valid text: it holds a lone surrogate at index {e.start}"
            ) from None
    return value


def handle(value: object, what: str = "handle") -> int:
    """A store handle or pager key: an int; out of range means it names nothing."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a {what} is an int, not {type(value).__name__}")
    if not 0 <= value <= U64_MAX:
        raise UnknownHandleError(f"unknown {what} {value}")
    return value


def timeout(value: object, *, negative_is_zero: bool = False) -> float | None:
    """A timeout in seconds, checked; None: wait for ever (None, ``inf``, or
    past ``threading.TIMEOUT_MAX``, which no wait can take). NaN raises
    ``InvalidArgumentError``; a negative one too, or with
    ``negative_is_zero`` means no wait (as ``concurrent.futures`` treats it);
    a bool or a non-number raises ``TypeError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout is a number of seconds, not {type(value).__name__}")
    if isinstance(value, float) and math.isnan(value):
        raise InvalidArgumentError("timeout is a number of seconds, not NaN")
    if value < 0:
        if negative_is_zero:
            return 0.0
        raise InvalidArgumentError(f"timeout must not be negative, not {value}")
    return None if value > threading.TIMEOUT_MAX else float(value)
