"""jmsstore: an embedded, persistent, JMS-style message broker with a Rust storage engine.

This release provides the file store (:class:`FileStore`): append-only
segments with group commit, recovery, compaction and body codecs.
"""

from jmsstore import inspect
from jmsstore._native import __version__
from jmsstore.errors import (
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
from jmsstore.store import FileStore, Transaction

__all__ = [
    "CorruptionError",
    "FileStore",
    "InvalidArgumentError",
    "JmsStoreError",
    "StoreClosedError",
    "StoreError",
    "StoreFullError",
    "StoreIOError",
    "StoreLockedError",
    "StorePoisonedError",
    "Transaction",
    "UnknownHandleError",
    "UnsupportedFormatError",
    "__version__",
    "inspect",
]
