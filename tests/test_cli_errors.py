"""First contact with the ``jmsstore`` command: ``--version``, plain text
help for every argument, exit status 1 for an error at run time and 2 for a
usage error, errors on one line without a traceback, and "did you mean"
when a JMS server's home is given where a store is wanted (or the other way
round)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jmsstore
import pytest
from jmsstore import FileStore, JMSServer, cli

Cli = Callable[..., subprocess.CompletedProcess[str]]
STORE_ACTIONS = ["verify", "dump", "compact", "stats", "salvage"]


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The process failed with ``code`` and said why in one line, no traceback; returns the line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("jmsstore: ")
    return lines[0]


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture
def server_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    with JMSServer(home) as server:
        server.create_queue("orders")
    return home


def test_version(cli: Cli) -> None:
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"jmsstore {jmsstore.__version__}"


def subcommand_parsers(
    parser: argparse.ArgumentParser, path: str = "jmsstore"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommand_parsers(sub, f"{path} {name}")


def test_every_argument_has_plain_text_help() -> None:
    """No reST markup (``literals``, :class: roles) in any help text; every
    positional argument says which directory it wants."""
    parsers = dict(subcommand_parsers(cli.parser()))
    assert {"jmsstore store verify", "jmsstore stats", "jmsstore demo"} <= set(parsers)
    for name, parser in parsers.items():
        text = parser.format_help()
        assert "``" not in text, name
        assert not re.search(r":[a-z]+:`", text), name
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{name}: {action.dest} has no help"
    for action in STORE_ACTIONS:
        text = parsers[f"jmsstore store {action}"].format_help()
        assert "STORE_DIR" in text and "store directory" in text, action
    stats = parsers["jmsstore stats"].format_help()
    assert "SERVER_DIR" in stats and "home directory" in stats and "SERVER_DIR/store" in stats
    assert "SERVER_DIR" in parsers["jmsstore demo"].format_help()
    assert "exit status" in parsers["jmsstore"].format_help()


def test_help_runs(cli: Cli) -> None:
    for args in (["--help"], ["store", "verify", "--help"], ["stats", "--help"], ["demo", "--help"]):
        proc = cli(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "usage: jmsstore" in proc.stdout and "``" not in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["bogus"],
        ["store"],
        ["store", "verify"],
        ["store", "verify", ".", "--bogus"],
        ["stats"],
        ["demo", "--messages", "0"],
        ["demo", "--threads", "many"],
    ],
)
def test_usage_errors_exit_2(cli: Cli, args: list[str]) -> None:
    proc = cli(*args)
    assert proc.returncode == 2, (args, proc.stderr)
    assert "usage: jmsstore" in proc.stderr and "error:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("action", STORE_ACTIONS)
def test_a_server_home_where_a_store_is_wanted(cli: Cli, server_home: Path, action: str) -> None:
    before = tree(server_home)
    line = assert_one_line_error(cli("store", action, str(server_home), "--no-progress"))
    assert f"did you mean {server_home / 'store'}?" in line
    assert tree(server_home) == before
    # And the store it meant works.
    assert cli("store", action, str(server_home / "store"), "--no-progress").returncode == 0


def test_a_store_where_a_server_home_is_wanted(cli: Cli, server_home: Path, tmp_path: Path) -> None:
    before = tree(server_home)
    line = assert_one_line_error(cli("stats", str(server_home / "store"), "--no-progress"))
    assert f"did you mean {server_home}?" in line
    line = assert_one_line_error(cli("demo", "--dir", str(server_home / "store"), "--messages", "1"))
    assert f"did you mean {server_home}?" in line
    assert tree(server_home) == before
    # A store directory named otherwise: what to run instead.
    with FileStore(tmp_path / "plain", max_segment_bytes=1 << 20) as store:
        store.put("c", b"x")
    line = assert_one_line_error(cli("stats", str(tmp_path / "plain"), "--no-progress"))
    assert f"jmsstore store stats {tmp_path / 'plain'}" in line


@pytest.mark.parametrize("kind", ["missing", "regular file", "empty directory"])
def test_stats_of_what_is_no_server_home(cli: Cli, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x"
    if kind == "regular file":
        path.write_bytes(b"hello")
    elif kind == "empty directory":
        path.mkdir()
    line = assert_one_line_error(cli("stats", str(path), "--no-progress"))
    assert str(path) in line
    assert sorted(tmp_path.iterdir()) == ([] if kind == "missing" else [path])


def test_demo_on_a_file_is_one_line(cli: Cli, tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("mine\n")
    line = assert_one_line_error(cli("demo", "--dir", str(a_file), "--messages", "10", "--threads", "1"))
    assert f"{a_file} is a file" in line
    assert a_file.read_text() == "mine\n"


def test_a_locked_store_is_a_runtime_error(cli: Cli, server_home: Path, hold_store: Callable[[Path, int], Any]) -> None:
    store = server_home / "store"
    holder = hold_store(store, 0)
    for action in ("compact", "salvage"):
        line = assert_one_line_error(cli("store", action, str(store), "--no-progress"))
        assert "StoreLockedError" in line
    line = assert_one_line_error(cli("demo", "--dir", str(server_home), "--messages", "10", "--threads", "1"))
    assert "StoreLockedError" in line and "is locked" in line
    line = assert_one_line_error(cli("demo", "--dir", str(server_home), "--reset", "--messages", "10"))
    assert "StoreLockedError" in line and "--reset" in line
    assert (store / "store.lock").exists()  # not reset
    holder.stop()


# Root reads and writes any directory through two capabilities; without them
# in its bounding set, root is held to a directory's mode like anyone else.
AS_ROOT_WITHOUT_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.fixture(scope="module")
def unprivileged() -> list[str]:
    """The prefix that runs a command without the power to ignore file modes."""
    if os.geteuid() != 0:
        return []
    try:
        probe = subprocess.run([*AS_ROOT_WITHOUT_OVERRIDE, "true"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("running as root and setpriv (util-linux) is not installed: root reads any directory")
    if probe.returncode != 0:
        pytest.skip(f"running as root and setpriv cannot drop its capabilities here: {probe.stderr.strip()}")
    return AS_ROOT_WITHOUT_OVERRIDE


@pytest.mark.parametrize("action", STORE_ACTIONS)
def test_permission_denied(unprivileged: list[str], server_home: Path, action: str) -> None:
    store = server_home / "store"
    before = tree(store)
    store.chmod(0)
    try:
        proc = subprocess.run(
            [*unprivileged, sys.executable, "-m", "jmsstore", "store", action, str(store), "--no-progress"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        store.chmod(0o700)
    line = assert_one_line_error(proc)
    assert "permission denied" in line.lower()
    assert tree(store) == before


@pytest.mark.parametrize("writes", [False, True])
def test_permission_denied_in_process(
    server_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], writes: bool
) -> None:
    """As root nothing is denied: what the command says when the check fails."""
    store = str(server_home / "store")
    monkeypatch.setattr(cli.os, "access", lambda path, mode: not (mode & os.W_OK) if writes else False)
    assert cli.main(["store", "compact" if writes else "verify", store, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err == f"jmsstore: {store}: permission denied (the command {'writes to' if writes else 'reads'} it)\n"


def test_an_os_error_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def denied(*_: object) -> int:
        raise PermissionError(13, "Permission denied", "/srv/jms/store/0000000001.seg")

    monkeypatch.setattr(cli, "run", denied)
    assert cli.main(["store", "verify", "x"]) == 1
    assert capsys.readouterr().err == "jmsstore: /srv/jms/store/0000000001.seg: Permission denied\n"
