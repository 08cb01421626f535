"""Crash test with real SIGKILL (DESIGN.md: an acknowledged persistent write
survives ``kill -9`` at any instant; a transaction is never half-visible).

Each cycle starts ``crash_child.py`` on the same store, lets it write from
several threads (and compact) for a random time, kills it with SIGKILL,
reopens the store in strict mode and checks it against the acknowledged
history: every acknowledged put/update is there with its body, every
acknowledged delete stays deleted, operations in flight at the kill may
have happened or not, transactions all or nothing. 50 cycles normally;
``JMSSTORE_LONG=1`` runs 2000 (or ``JMSSTORE_CRASH_CYCLES``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from crash_child import THREADS, body_for
from crash_helpers import crash_cycles
from jmsstore import FileStore

HERE = Path(__file__).parent


def cycles() -> int:
    return crash_cycles(50, 2000)


@dataclass
class InFlight:
    kind: str
    args: list[int]


@dataclass
class Expect:
    """What one collection must hold: handle -> body id (None = unknown body)."""

    live: dict[int, int | None] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    in_flight: InFlight | None = None


def run_child(path: Path, seed: int, rng: random.Random) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "crash_child.py"), str(path), str(seed)],
        stdout=subprocess.PIPE,
        bufsize=0,  # readline below must not buffer past the first line
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
    )
    assert proc.stdout is not None
    # Sometimes kill during start-up (recovery), usually while writing.
    if rng.random() < 0.15:
        time.sleep(rng.uniform(0.0, 0.25))
    else:
        first = proc.stdout.readline()
        if first != b"R\n":
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"child failed to start: {first!r} {err.decode()[-2000:]}")
        time.sleep(rng.uniform(0.01, 0.4))
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"child exited by itself: {proc.returncode} {err.decode()[-2000:]}"
    text = out.decode(errors="replace")
    lines = text.split("\n")
    return lines[:-1]  # the last element is an incomplete line (or empty)


def apply_history(expect: dict[int, Expect], lines: list[str]) -> int:
    acked = 0
    for line in lines:
        parts = line.split()
        if not parts or parts[0] == "R":
            continue
        tid = int(parts[1])
        e = expect[tid]
        if parts[0] == "b":
            e.in_flight = InFlight(parts[3], [int(x) for x in parts[4:]])
            continue
        assert parts[0] == "a" and e.in_flight is not None, line
        op, args = e.in_flight.kind, e.in_flight.args
        if op == "put":
            e.live[int(parts[3])] = args[0]
        elif op == "upd":
            e.live[args[0]] = args[1]
        elif op == "del":
            e.live.pop(args[0], None)
            e.deleted.add(args[0])
        elif op == "tx":
            new, new_body, upd, upd_body, dele = args
            e.live[new] = new_body
            e.live[upd] = upd_body
            e.live.pop(dele, None)
            e.deleted.add(dele)
        e.in_flight = None
        acked += 1
    return acked


def check(store: FileStore, expect: dict[int, Expect]) -> None:
    for tid in range(THREADS):
        e = expect[tid]
        actual = dict(store.scan(f"t{tid}"))
        flight = e.in_flight
        allowed_extra: dict[int, int] = {}
        alternatives: dict[int, set[int | None]] = {}
        if flight is not None:
            if flight.kind == "put":
                pass  # its handle was never printed: checked below by body
            elif flight.kind == "upd":
                alternatives[flight.args[0]] = {flight.args[1]}
            elif flight.kind == "del":
                alternatives[flight.args[0]] = {"deleted"}  # type: ignore[arg-type]
            elif flight.kind == "tx":
                new, new_body, upd, upd_body, dele = flight.args
                applied = new in actual
                assert applied == (dele not in actual), f"t{tid}: transaction half visible: {flight}"
                if applied:
                    assert actual[upd] == body_for(upd_body), f"t{tid}: transaction half visible: {flight}"
                    allowed_extra[new] = new_body
                    alternatives[upd] = {upd_body}
                    alternatives[dele] = {"deleted"}  # type: ignore[arg-type]
                else:
                    assert e.live.get(upd) is None or actual[upd] == body_for(e.live[upd])  # type: ignore[arg-type]
        for handle, body_id in e.live.items():
            alt = alternatives.get(handle, set())
            if handle not in actual:
                assert "deleted" in alt, f"t{tid}: acknowledged handle {handle} lost"  # type: ignore[operator]
                continue
            ok = body_id is None or actual[handle] == body_for(body_id)
            ok = ok or any(b is not None and b != "deleted" and actual[handle] == body_for(b) for b in alt)
            assert ok, f"t{tid}: handle {handle} has the wrong body"
        for handle in e.deleted:
            assert handle not in actual, f"t{tid}: deleted handle {handle} came back"
        extra = set(actual) - set(e.live)
        for handle in extra:
            if handle in allowed_extra:
                assert actual[handle] == body_for(allowed_extra[handle])
                continue
            assert flight is not None and flight.kind == "put", f"t{tid}: unexpected handle {handle}"
            assert actual[handle] == body_for(flight.args[0]), f"t{tid}: in-flight put with wrong body"
            assert len(extra) == 1, f"t{tid}: more than one unacknowledged put appeared"
        # The store is now the truth for the next cycle (it was checked above).
        e.live = dict.fromkeys(actual)
        e.deleted = set()
        e.in_flight = None


def test_sigkill_at_random_instants_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "store"
    rng = random.Random(int(os.environ.get("JMSSTORE_CRASH_SEED", "20261121")))
    expect = {tid: Expect() for tid in range(THREADS)}
    total_acked = 0
    for cycle in range(cycles()):
        lines = run_child(path, seed=rng.getrandbits(32), rng=rng)
        total_acked += apply_history(expect, lines)
        with FileStore(path, recovery="strict") as store:
            report = store.recovery_report
            assert not report["damaged"], f"cycle {cycle}: damage after a process crash: {report}"
            try:
                check(store, expect)
            except AssertionError as e:
                raise AssertionError(f"cycle {cycle}: {e}") from e
            # The store stays writable after recovery.
            h = store.put("probe", b"x")
            store.delete(h)
    assert total_acked > cycles() * 5, f"too few acknowledged operations ({total_acked}) to mean anything"
