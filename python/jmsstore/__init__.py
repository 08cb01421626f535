"""jmsstore: an embedded, persistent, JMS-style message broker with a Rust storage engine.

This release provides the file store (:class:`FileStore`): append-only
segments with group commit, recovery, compaction and body codecs; and the
paging engine (:class:`Pager`): resident headers, bodies against a budget.
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
from jmsstore.pager import Pager
from jmsstore.store import FileStore, Transaction

__all__ = [
    "CorruptionError",
    "FileStore",
    "InvalidArgumentError",
    "JmsStoreError",
    "Pager",
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
