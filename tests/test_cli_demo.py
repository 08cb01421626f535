"""``jmsstore demo``: what it explains, ``--reset``, and the store it leaves
behind: compacted on exit, so that runs do not pile up 64 MiB segments."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]
SMALL = ("--messages", "200", "--threads", "4")


def run_demo(cli: Cli, directory: Path, *extra: str) -> str:
    proc = cli("demo", "--dir", str(directory), *SMALL, *extra, timeout=180)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stdout


def on_disk(store: Path) -> int:
    """Bytes the store's files take (their sizes, and the blocks they hold)."""
    files = [p for p in store.rglob("*") if p.is_file()]
    return max(sum(p.stat().st_size for p in files), sum(p.stat().st_blocks * 512 for p in files))


def test_demo_explains_what_it_shows(cli: Cli, tmp_path: Path) -> None:
    out = run_demo(cli, tmp_path / "demo")
    # fsyncs per message sent, not per record written.
    assert "fsyncs" in out and "per message sent" in out and "per record" not in out
    # Why the non-persistent message is not there after the restart.
    assert "'not persistent' is missing" in out and "NON_PERSISTENT" in out and "never written to the store" in out
    # That the statistics count from the restart.
    assert "statistics of the restarted server (counted from the restart" in out


def test_two_runs_leave_a_compacted_store(cli: Cli, tmp_path: Path) -> None:
    """Two runs used to leave two preallocated 64 MiB segments for four live
    records; the demo compacts the store on exit."""
    directory = tmp_path / "demo"
    store = directory / "store"
    first = run_demo(cli, directory)
    assert "compacted the store on exit" in first and "for 4 live records" in first
    after_one = on_disk(store)
    second = run_demo(cli, directory)
    assert "started: boot 3" in second  # the second run's first start: its store was kept
    assert "for 4 live records" in second
    after_two = on_disk(store)
    assert after_two < 256 << 10, sorted((p.name, p.stat().st_size) for p in store.iterdir())
    assert after_two <= after_one + (64 << 10)  # runs do not pile up
    assert not any(p.stat().st_size >= 1 << 20 for p in store.iterdir())


def test_reset_starts_afresh(cli: Cli, tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    run_demo(cli, directory)
    out = run_demo(cli, directory, "--reset")
    assert f"removed {directory} (--reset)" in out
    assert "started: boot 1, 0 queues, 0 topics, 0 durable subscriptions, 0 messages recovered" in out
    # Without --reset the next run continues where this one stopped.
    assert "started: boot 3" in run_demo(cli, directory)


def test_reset_of_a_missing_directory_just_runs(cli: Cli, tmp_path: Path) -> None:
    out = run_demo(cli, tmp_path / "new", "--reset")
    assert "removed" not in out and "started: boot 1" in out


def test_reset_refuses_a_directory_that_holds_more(cli: Cli, tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    run_demo(cli, directory)
    (directory / "notes.txt").write_text("mine\n")
    proc = cli("demo", "--dir", str(directory), "--reset", *SMALL)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert f"not resetting {directory}" in proc.stderr and "notes.txt" in proc.stderr
    assert (directory / "notes.txt").read_text() == "mine\n"
    assert (directory / "store").is_dir()
