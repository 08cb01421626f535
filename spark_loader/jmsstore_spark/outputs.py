"""Outputs that are verifiably written, or not there at all.

Every job that writes (export, report) writes into a staging directory
beside its target, renamed into place by a rename that refuses an existing
target (:meth:`~jmsstore_spark.hadoop.HadoopFiles.rename_new`). Before the
staging directory is renamed, the
driver reads back what was committed: it must hold data files, and the rows
read back from each output must be the rows the job computed. Anything that
fails raises :class:`OutputError` and removes the staging directory (it has
a name of its own, so nothing else is removed); the target never exists
half-written.

Why the driver reads back: on a cluster whose executors write where the
driver cannot see (each worker's own local directory), Spark commits the
job anyway and leaves directories holding only ``_SUCCESS``.

The driver lists, creates, renames and removes outputs through Spark's
Hadoop file system layer, so an output may be any URI Spark writes
(``file://``, ``hdfs://``, ``s3a://``); a plain path is a local path, as
:func:`output_uri` says.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

from jmsstore_spark.hadoop import HadoopFiles, hadoop_uri

__all__ = ["OutputError", "Outputs", "output_uri", "shown"]

_SHARED_STORAGE = "the output must be on storage the driver and every executor share"


class OutputError(RuntimeError):
    """An output that was not verifiably written (nothing is left at its target)."""


def output_uri(path: str) -> str:
    """``path`` as Spark's Hadoop layer is given it: a plain path or a
    ``file:`` URI becomes the ``file:`` URI of the absolute local path (so a
    plain path stays local where the cluster's default file system is
    HDFS); a URI of another scheme is kept as it is."""
    return hadoop_uri(path)


def shown(uri: str) -> str:
    """How an output is named to a user: the local path of a ``file:`` URI
    :func:`output_uri` made, any other URI as it is."""
    return uri.removeprefix("file:") if uri.startswith("file:/") and not uri.startswith("file://") else uri


class Outputs(HadoopFiles):
    """The driver's file operations on outputs, through Spark's Hadoop layer."""

    def data_files(self, uri: str) -> list[str]:
        """The data files under ``uri``: every file whose name, and whose
        directories' names below ``uri``, do not start with ``_`` or ``.``
        (what Spark reads back; ``_SUCCESS`` is not data)."""
        fs, path = self.fs(uri)
        if not fs.exists(path):
            return []
        root = fs.makeQualified(path).toUri().getPath().rstrip("/")
        found: list[str] = []
        files = fs.listFiles(path, True)
        while files.hasNext():
            status = files.next()
            name = status.getPath()
            below = name.toUri().getPath()[len(root) :].strip("/").split("/")
            if not any(part.startswith(("_", ".")) for part in below):
                found.append(name.toString())
        return found

    def mkdirs(self, uri: str) -> None:
        fs, path = self.fs(uri)
        if not fs.mkdirs(path):
            raise OutputError(f"could not create {uri}")

    def write_text(self, uri: str, text: str) -> None:
        """Writes a new file at ``uri`` (refused if it exists)."""
        fs, path = self.fs(uri)
        out = fs.create(path, False)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()

    def publish(self, staging: str, target: str) -> None:
        """Renames ``staging`` to ``target``, refused if ``target`` exists (no
        check first: see :meth:`~jmsstore_spark.hadoop.HadoopFiles.rename_new`)."""
        self.rename_new(staging, target)
        if not self.exists(target):
            raise OutputError(f"could not rename {staging} to {target}")

    @contextlib.contextmanager
    def staged(self, target: str) -> Iterator[str]:
        """A staging directory (not created yet) beside ``target``: renamed
        to ``target`` when the block ends without error (verification is the
        block's last step), removed when it fails."""
        if self.exists(target):
            raise FileExistsError(f"{target} exists: a job writes a new directory")
        parent, _, name = target.rpartition("/")
        staging = f"{parent}/.{name}.staging-{uuid.uuid4().hex[:12]}"
        try:
            yield staging
            self.publish(staging, target)  # visible at once, or not at all
        except BaseException:
            self.remove(staging)  # its name is ours alone
            raise

    def check_parquet(self, uri: str, rows: int, what: str) -> None:
        """Raises :class:`OutputError` unless the Parquet output at ``uri``
        holds data files and ``rows`` rows read back."""
        self._check_files(uri, rows, what)
        found = self.spark.read.parquet(uri).count()
        if found != rows:
            raise OutputError(f"{what}: {found} rows read back from {uri}, not the {rows} written; {_SHARED_STORAGE}")

    def check_lines(self, uri: str, rows: int, what: str) -> None:
        """As :meth:`check_parquet`, for a JSON lines output (one row a line)."""
        self._check_files(uri, rows, what)
        found = self.spark.read.text(uri).count()
        if found != rows:
            raise OutputError(f"{what}: {found} rows read back from {uri}, not the {rows} written; {_SHARED_STORAGE}")

    def _check_files(self, uri: str, rows: int, what: str) -> None:
        if not self.data_files(uri):
            raise OutputError(
                f"{what}: the job committed no data files to {uri} ({rows} rows computed): "
                f"its executors wrote where the driver cannot see; {_SHARED_STORAGE}"
            )
