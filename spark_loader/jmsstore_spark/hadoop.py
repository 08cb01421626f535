"""The driver's file operations through Spark's Hadoop file system layer.

Stores and outputs named by a URI of any scheme Hadoop has a file system
for (``hdfs://``, ``s3a://``, ``abfs://``, ``gs://``, ...) are listed,
read, created, renamed and removed here, on the driver, through the JVM of
the Spark session (``FileSystem`` and ``FileContext`` of the session's
Hadoop configuration, so ``--conf spark.hadoop.*`` settings apply).

Local paths and ``file:`` URIs take a shortcut by default: the store
reader reads them where they are, and an import writes its store in place.
The setting :data:`LOCAL_SHORTCUT` (``spark.jmsstore.localShortcut``, default
``true``) set to ``false`` sends them through the Hadoop layer like any
other URI (plain paths as ``file:`` URIs): the path a store on HDFS or in
an object store takes, on a file system every test machine has.

A scheme Hadoop has no file system for raises :class:`StoreLocationError`
naming it, before anything is read or written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from jmsstore_spark.checks import local_path, scheme
from jmsstore_spark.renames import NOREPLACE, renameat2

__all__ = [
    "LOCAL_SHORTCUT",
    "HadoopFiles",
    "StoreLocationError",
    "hadoop_uri",
    "local_shortcut",
    "through_hadoop",
]

#: The Spark setting that sends local paths and ``file:`` URIs through the
#: Hadoop layer too when ``false`` (default ``true``: they are read in place).
LOCAL_SHORTCUT = "spark.jmsstore.localShortcut"

#: Bytes of a segment's header (see the store's on-disk format).
SEGMENT_HEADER_LEN = 80


class StoreLocationError(ValueError):
    """A store or output URI that cannot be used: no Hadoop file system for
    its scheme, or nothing (or no store) there. Nothing was read or written."""


def local_shortcut(spark_or_settings: Any) -> bool:
    """Whether local paths and ``file:`` URIs are read and written in place
    (the :data:`LOCAL_SHORTCUT` setting of a session, or of a dict of
    settings such as ``jmsstore-spark``'s ``--conf``)."""
    if isinstance(spark_or_settings, dict):
        value = spark_or_settings.get(LOCAL_SHORTCUT, "true")
    else:
        value = spark_or_settings.conf.get(LOCAL_SHORTCUT, "true")
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{LOCAL_SHORTCUT} is true or false, not {value!r}")
    return text == "true"


def through_hadoop(path: str, shortcut: bool = True) -> bool:
    """Whether ``path`` is read or written through the Hadoop layer: a URI
    of a scheme other than ``file``, or any path without the shortcut."""
    return not shortcut or scheme(path) not in (None, "file")


def hadoop_uri(path: str) -> str:
    """``path`` as the Hadoop layer is given it: a plain path or a ``file:``
    URI as the ``file:`` URI of the absolute local path, any other URI as
    it is (without a trailing ``/``)."""
    local = local_path(path)
    if local is None:
        return path.rstrip("/") or path
    return "file:" + os.path.abspath(local)


def _java_error(error: Exception) -> str:
    """The Java exception's class and message out of a Py4J error."""
    for line in str(error).splitlines():
        line = line.strip()
        if line.startswith(":"):
            return line[1:].strip()
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _rename_noreplace(source: str, target: str) -> bool:
    """Renames local ``source`` to ``target`` in one step that fails if
    ``target`` exists (``renameat2`` with ``RENAME_NOREPLACE``); False
    where the kernel or file system cannot (nothing renamed then)."""
    try:
        return renameat2(source, target, NOREPLACE)
    except FileExistsError:
        raise FileExistsError(f"{target} exists: a job writes a new directory") from None


class HadoopFiles:
    """File operations on URIs through the Spark session's Hadoop layer."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._jvm = spark._jvm
        self._gateway = spark.sparkContext._gateway
        self._conf = spark._jsc.hadoopConfiguration()

    def fs(self, uri: str) -> tuple[Any, Any]:
        """The Hadoop ``FileSystem`` of ``uri`` and its ``Path``; a scheme
        without a file system is a :class:`StoreLocationError`."""
        path = self._jvm.org.apache.hadoop.fs.Path(uri)
        try:
            return path.getFileSystem(self._conf), path
        except Exception as e:
            if "UnsupportedFileSystemException" in str(e) or "No FileSystem for scheme" in str(e):
                raise StoreLocationError(
                    f"{uri}: Hadoop has no file system for the scheme {scheme(uri)!r} "
                    "(its connector is not on Spark's class path, or the URI is mistyped); nothing was read or written"
                ) from None
            raise

    def _raw(self, uri: str) -> tuple[Any, Any]:
        """As :meth:`fs`, without the ``.crc`` side files the local file
        system writes beside each file (a store directory holds store files only)."""
        fs, path = self.fs(uri)
        if str(fs.getScheme()) == "file":
            fs = fs.getRawFileSystem()
        return fs, path

    def exists(self, uri: str) -> bool:
        fs, path = self.fs(uri)
        return bool(fs.exists(path))

    def is_dir(self, uri: str) -> bool:
        fs, path = self.fs(uri)
        return bool(fs.exists(path) and fs.getFileStatus(path).isDirectory())

    def files(self, uri: str) -> dict[str, int]:
        """The files directly in directory ``uri``: name -> size."""
        fs, path = self.fs(uri)
        return {str(s.getPath().getName()): int(s.getLen()) for s in fs.listStatus(path) if s.isFile()}

    def glob(self, pattern: str) -> list[str]:
        """The qualified URIs matching ``pattern`` (Hadoop glob syntax), sorted."""
        fs, path = self.fs(pattern)
        found = fs.globStatus(path)
        return sorted(str(status.getPath().toString()) for status in (found or []))

    def head(self, uri: str, length: int) -> bytes:
        """The first ``length`` bytes of file ``uri`` (fewer if it is shorter)."""
        fs, path = self.fs(uri)
        stream = fs.open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length)
        finally:
            stream.close()
        return bytes(data)

    def mkdirs(self, uri: str) -> None:
        fs, path = self.fs(uri)
        if not fs.mkdirs(path):
            raise OSError(f"could not create {uri}")

    def remove(self, uri: str) -> None:
        fs, path = self.fs(uri)
        if fs.exists(path):
            fs.delete(path, True)

    def rename_new(self, source: str, target: str) -> None:
        """Renames ``source`` to ``target``, refused with
        :class:`FileExistsError` if ``target`` exists (``FileContext.rename``
        without ``OVERWRITE``). On HDFS the name node checks and renames in
        one step; on other file systems Hadoop checks first, then renames
        (object stores copy and delete: not atomic at all). A local rename
        (``file:`` with the local shortcut) is one ``renameat2`` with
        ``RENAME_NOREPLACE`` where the kernel and file system have it. A
        file system without a ``FileContext`` binding
        (``fs.AbstractFileSystem.SCHEME.impl``) is renamed with
        ``FileSystem.rename`` after a check that the target is absent."""
        if local_shortcut(self.spark) and scheme(source) == scheme(target) == "file":
            local_source, local_target = local_path(source), local_path(target)
            if local_source is not None and local_target is not None and _rename_noreplace(local_source, local_target):
                return
        fs, src = self.fs(source)
        _, dst = self.fs(target)
        try:
            context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(src.toUri(), self._conf)
        except Exception as e:
            if "UnsupportedFileSystemException" not in str(e):
                raise
            if fs.exists(dst):
                raise FileExistsError(f"{target} exists: a job writes a new directory") from None
            if not fs.rename(src, dst):
                raise OSError(f"could not rename {source} to {target}") from None
            return
        rename = getattr(self._jvm.org.apache.hadoop.fs, "Options$Rename")
        options = self._gateway.new_array(rename, 1)
        options[0] = rename.NONE
        try:
            context.rename(src, dst, options)
        except Exception as e:
            if "FileAlreadyExistsException" in str(e):
                raise FileExistsError(f"{target} exists: a job writes a new directory") from None
            raise OSError(f"could not rename {source} to {target}: {_java_error(e)}") from None

    def download(self, uri: str, local: str) -> None:
        """Copies file or directory ``uri`` to the new local path ``local``."""
        fs, path = self._raw(uri)
        fs.copyToLocalFile(False, path, self._jvm.org.apache.hadoop.fs.Path("file:" + os.path.abspath(local)), True)

    def upload(self, local: str, uri: str) -> None:
        """Copies the local directory ``local`` to the new URI ``uri``."""
        fs, path = self._raw(uri)
        source = self._jvm.org.apache.hadoop.fs.Path("file:" + os.path.abspath(local))
        fs.copyFromLocalFile(False, False, source, path)

    @contextlib.contextmanager
    def local_copy(self, uri: str) -> Iterator[str]:
        """A copy of directory ``uri`` in a temporary local directory, removed
        after the block."""
        parent = tempfile.mkdtemp(prefix="jmsstore-spark-")
        try:
            local = os.path.join(parent, "store")
            self.download(uri, local)
            yield local
        finally:
            shutil.rmtree(parent, ignore_errors=True)
