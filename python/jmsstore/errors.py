"""The exception hierarchy.

Every error jmsstore raises derives from :class:`JmsStoreError`. The file
store's errors derive from :class:`StoreError`; the classes are created by
the native module so that Rust and Python raise the very same types.
"""

from jmsstore._native import (
    CorruptionError,
    InvalidArgumentError,
    JmsStoreError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StorePoisonedError,
    UnknownHandleError,
    UnsupportedFormatError,
)

__all__ = [
    "CorruptionError",
    "InvalidArgumentError",
    "JmsStoreError",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StoreLockedError",
    "StorePoisonedError",
    "UnknownHandleError",
    "UnsupportedFormatError",
]
