"""What the broker crash tests share: the number of cycles, a child process
killed with SIGKILL at a random instant, its journal, and (for the child
itself) the journal it writes and how it dies on an error."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
START_TIMEOUT = 60.0


def crash_cycles(normal: int, long: int) -> int:
    """``JMSSTORE_CRASH_CYCLES`` if set, else ``long`` with ``JMSSTORE_LONG=1``, else ``normal``."""
    if "JMSSTORE_CRASH_CYCLES" in os.environ:
        return int(os.environ["JMSSTORE_CRASH_CYCLES"])
    return long if os.environ.get("JMSSTORE_LONG") else normal


# ------------------------------------------------------------------ the test's side


def read_journal(path: Path) -> list[str]:
    """The whole lines of a journal: a torn last line (no newline) is dropped."""
    data = path.read_bytes() if path.exists() else b""
    return data.decode().split("\n")[:-1]


def start_child(
    script: str, directory: Path, journal: Path, cycle: int, seed: int, drain: bool
) -> subprocess.Popen[bytes]:
    """``script`` (a file beside this one) as a child, its stderr to
    ``<journal>.err`` (a pipe nobody reads could fill and stall it)."""
    args = [sys.executable, str(HERE / script), str(directory), str(journal), str(cycle), str(seed)]
    with open(journal.with_suffix(".err"), "wb") as err:
        return subprocess.Popen(
            [*args, "drain"] if drain else args,
            stdout=subprocess.PIPE,
            stderr=err,
            bufsize=0,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
        )


def stderr_of(journal: Path) -> str:
    return journal.with_suffix(".err").read_text(errors="replace")[-3000:]


def wait_for(proc: subprocess.Popen[bytes], journal: Path, word: bytes) -> None:
    """Waits until the child prints ``word`` on a line of its own."""
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT
    seen = b""
    while word + b"\n" not in seen:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([proc.stdout], [], [], max(remaining, 0))
        chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"child did not print {word!r} (output {seen!r}): {stderr_of(journal)}")
        seen += chunk


def kill_at_random(script: str, directory: Path, journal: Path, cycle: int, rng: random.Random) -> None:
    """One cycle: starts the child and kills it with SIGKILL, one time in
    ten inside recovery (or just after it), else while it works."""
    proc = start_child(script, directory, journal, cycle, rng.getrandbits(32), drain=False)
    if rng.random() < 0.1:
        wait_for(proc, journal, b"OPENING")
        time.sleep(rng.uniform(0.0, 0.05))
    else:
        wait_for(proc, journal, b"READY")
        time.sleep(rng.uniform(0.3, 1.5))
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"child exited by itself: {proc.returncode} {stderr_of(journal)}"


def crash_journals(
    script: str, directory: Path, journals: Path, cycles: int, rng: random.Random
) -> Iterator[list[str]]:
    """The journal of each of ``cycles`` runs of ``script`` killed at random
    (:func:`kill_at_random`), then of the drain run that ends the test (the
    child with ``drain``, which must exit 0 within two minutes); journals
    are files ``journal-NNNN.log`` in ``journals``."""
    for cycle in range(cycles):
        journal = journals / f"journal-{cycle:04d}.log"
        kill_at_random(script, directory, journal, cycle, rng)
        yield read_journal(journal)
    journal = journals / f"journal-{cycles:04d}.log"
    proc = start_child(script, directory, journal, cycles, rng.getrandbits(32), drain=True)
    try:
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, f"the drain run failed: {proc.returncode} {stderr_of(journal)}"
    yield read_journal(journal)


# ------------------------------------------------------------------ the child's side


class Journal:
    """Lines appended with one write each, so a SIGKILL tears at most the last."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, *words: object) -> None:
        os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())


def die_on_thread_error(journal: Journal) -> None:
    """An exception in any thread is journalled and ends the child at once
    (exit 70), so the test sees it rather than a child that only hangs."""

    def died(args: threading.ExceptHookArgs) -> None:
        journal.write("ERROR", repr(args.exc_value).replace("\n", " "))
        sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)  # type: ignore[arg-type]
        os._exit(70)

    threading.excepthook = died


def journal_send_outcome(journal: Journal, message: Any, error: BaseException | None) -> None:
    """An asynchronous send's completion: ``SENT uid``, or ``FAILED uid why``."""
    uid = message.get_property("uid")
    if error is None:
        journal.write("SENT", uid)
    else:
        journal.write("FAILED", uid, repr(error).replace("\n", " "))
