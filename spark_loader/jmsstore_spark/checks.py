"""Checks of paths and options that need no Spark: the data source runs
them before any task, and ``jmsstore-spark`` runs them before it starts
the JVM, so that a typo costs a line, not a minute of Spark start-up.

This module imports neither pyspark nor pyarrow (a test holds it to that).
Nothing here opens or locks a store: stores are recognised by their
segment headers (:func:`jmsstore.inspect.segments`), as the reader does.

Paths: a local path, or a ``file:`` URI naming one (``file:///data/s``).
A URI of another scheme (``hdfs://``, ``s3a://``) is not a local path:
:func:`local_path` gives None and each caller decides (the ``jmsstore``
data source reads and writes local directories only; such stores and
targets go through :mod:`jmsstore_spark.hadoop` and
:mod:`jmsstore_spark.stores`).
"""

from __future__ import annotations

import glob
import os
import re
import urllib.parse
from collections.abc import Sequence

from jmsstore import inspect
from jmsstore.broker.layout import message_collection
from jmsstore.errors import JmsStoreError

__all__ = [
    "StoreImportError",
    "check_apart",
    "check_new_directory",
    "check_parquet",
    "check_target",
    "is_store",
    "local_path",
    "messages_by_collection",
    "scheme",
    "store_paths",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")
_NOT_A_STORE = re.compile(r"is not a store directory \((.*)\)$")


class StoreImportError(ValueError):
    """A row or a target an import cannot take (nothing is written)."""


def scheme(path: str) -> str | None:
    """The URI scheme of ``path`` in lower case (``file``, ``hdfs``, ...), or
    None for a plain path. A scheme is only recognised before ``:/``, so
    ``a:b`` stays a relative path."""
    match = _SCHEME.match(path)
    return match.group(1).lower() if match else None


def local_path(path: str) -> str | None:
    """The local path ``path`` names: itself, the path of a ``file:`` URI,
    or None for a URI of another scheme."""
    kind = scheme(path)
    if kind is None:
        return path
    if kind != "file":
        return None
    parts = urllib.parse.urlsplit(path)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{path}: a file URI names a local path (file:///path), not one on host {parts.netloc!r}")
    return urllib.parse.unquote(parts.path)


def _local(path: str) -> str:
    local = local_path(path)
    if local is None:
        raise ValueError(
            f"{path}: the jmsstore data source reads stores on the local file system only (a path or a "
            f"file:// URI, not {scheme(path)}:); jmsstore-spark and jmsstore_spark.stores.read_view read "
            "any Hadoop URI"
        )
    return local


def is_store(path: str) -> bool:
    """Whether ``path`` is a store directory (its segments are readable)."""
    try:
        inspect.segments(path)
    except JmsStoreError:
        return False
    return True


def store_paths(spec: str) -> list[str]:
    """The store directories ``spec`` names: paths, ``file:`` URIs or globs,
    comma separated. A path that is not a store is an error naming it
    (nothing is read)."""
    found: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        pattern = _local(part)
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise ValueError(f"no store directory matches {part!r}")
        for path in matches:
            if not os.path.lexists(path):
                raise ValueError(f"{path} is not a readable jmsstore store: it does not exist")
            try:
                inspect.segments(path)  # refuses what is not a store (and a newer format)
            except JmsStoreError as e:
                plain = _NOT_A_STORE.search(str(e))  # "invalid argument: PATH is not a store directory (WHY)"
                raise ValueError(f"{path} is not a readable jmsstore store: {plain[1] if plain else e}") from e
            found.append(os.path.abspath(path))
    if not found:
        raise ValueError("no store directory given (load(path) or option('path', ...))")
    return found


def messages_by_collection(store: str) -> dict[str, int]:
    """The messages of each queue and subscription of the closed store at
    ``store`` (what a server opening it would find; read-only)."""
    live, _ = inspect.live(store)
    messages: dict[str, int] = {}
    for _, collection, _, _ in live:
        if message_collection(collection) is not None:
            messages[collection] = messages.get(collection, 0) + 1
    return messages


def _nearest_existing(path: str) -> str:
    parent = os.path.dirname(path)
    while parent and not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    return parent or "."


def check_new_directory(path: str, what: str) -> str:
    """The absolute local path of a directory ``what`` is about to create:
    it must not exist, and the directory it goes into must be one we can
    write (or be created in one)."""
    target = os.path.abspath(_local(path))
    if os.path.lexists(target):
        raise FileExistsError(f"{target} exists: {what} writes a new directory")
    parent = _nearest_existing(target)
    if not os.path.isdir(parent):
        raise ValueError(f"{target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{target}: {parent} is not writable")
    return target


def check_apart(output: str, inputs: Sequence[str], what: str) -> None:
    """Refuses a local ``output`` that is one of the local ``inputs``, is
    inside one (a job would write into what it reads) or holds one.
    Symbolic links are followed; globs among the inputs are expanded."""
    out = local_path(output)
    if out is None:
        return
    real_out = os.path.realpath(out)
    for given in inputs:
        local = local_path(given)
        if local is None:
            continue
        for match in sorted(glob.glob(local)) if glob.has_magic(local) else [local]:
            real_in = os.path.realpath(match)
            if real_out == real_in:
                raise ValueError(f"{output} is {match}: {what} cannot write where it reads")
            if os.path.commonpath([real_out, real_in]) == real_in:
                raise ValueError(f"{output} is inside {match}: {what} cannot write into what it reads")
            if os.path.commonpath([real_out, real_in]) == real_out:
                raise ValueError(f"{output} holds {match}: {what} cannot write over what it reads")


def check_parquet(path: str) -> None:
    """Refuses a local Parquet input that does not exist or holds no data
    file (Spark skips names starting with ``_`` or ``.``, as here). A URI of
    another scheme passes: Spark reads it through Hadoop and checks it."""
    local = local_path(path)
    if local is None:
        return
    matches = sorted(glob.glob(local)) if glob.has_magic(local) else [local]
    if not matches or not any(os.path.exists(m) for m in matches):
        raise ValueError(f"{path} does not exist" if matches == [local] else f"nothing matches {path!r}")
    for match in matches:
        if os.path.isdir(match) and is_store(match):
            raise ValueError(f"{match} is a jmsstore store, not an export: export it first (jmsstore-spark export)")
    for match in matches:
        if os.path.isfile(match):
            return
        for _, dirs, files in os.walk(match):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            if any(not f.startswith(("_", ".")) for f in files):
                return
    raise ValueError(f"{path} holds no Parquet files (an export writes them)")


def _locked(path: str) -> bool:
    """Whether a process holds the flock of ``path`` (read from
    /proc/locks, so without taking it); False where that is not known."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return False
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" ("->" marks a waiter)
        if "->" not in fields and "FLOCK" in fields and where in fields:
            return True
    return False


def check_target(target: str, overwrite: bool) -> None:
    """Refuses a target an import may not write (before any task runs)."""
    if not os.path.exists(target):
        parent = os.path.dirname(target) or "."
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise StoreImportError(f"{parent} is not a directory")
        return
    if not os.path.isdir(target):
        raise StoreImportError(f"{target} exists and is not a directory")
    if not os.listdir(target):
        return
    if not overwrite:
        raise StoreImportError(
            f"{target} is not empty: an import writes a new store (mode 'overwrite' replaces a store)"
        )
    if not is_store(target):
        raise StoreImportError(f"{target} is not empty and not a jmsstore store: overwrite refuses to replace it")
    if _locked(os.path.join(target, "store.lock")):
        raise StoreImportError(f"{target} is open in another process: overwrite refuses it")
