"""Unit-of-order crash test with real SIGKILL (WebLogic's Message Unit-of-Order: a unit's
messages are processed in the order they were created, one consumer at a time, and
messages that come back are redelivered before the unit's later ones, also across a
restart; JMS 2.0 §6.2.11: a message is delivered once, or again with ``JMSRedelivered``).

Each cycle starts ``uoo_crash_child.py`` on the same server directory: three producers
(two with sync sends sharing three units, one with async sends on two more; random
priorities) act as one per unit while five
consumers (CLIENT and transacted; ``receive`` and listeners; one prefetch per run, 1, 10
or 50) receive, acknowledge, commit, recover, roll back and reopen their sessions; the
message buffer is small, so bodies page out. After a random 0.3-1.5 s the child is killed
with SIGKILL (one cycle in ten right after it starts opening the server, so kills also land
in recovery). A last run drains the queue with a CLIENT consumer and closes cleanly. The
journals (see the child's docstring) are then replayed, in order, against the rules
(:meth:`Replay.receipt`):

1. a receipt of message ``x`` of unit ``U`` comes while no other session holds messages of
   ``U`` (received, not yet settled or released);
2. every message of ``U`` created before ``x`` (and stored: it is received at some point)
   is by then consumed, or held by the same session (ordered delivery and redelivery);
   across a restart, a settlement in progress at the kill may or may not have happened;
3. ``x`` was not consumed before, and a receipt after its first has ``redelivered`` set and
   a higher delivery count;

and every sent message is received. 6 cycles normally; ``JMSSTORE_LONG=1`` runs 100 (or
``JMSSTORE_CRASH_CYCLES``; ``JMSSTORE_CRASH_SEED`` picks the random choices).
"""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from crash_helpers import crash_cycles, crash_journals

SCRIPT = "uoo_crash_child.py"


Order = tuple[int, int]  # (cycle, number): a unit's creation order


def parse_uid(uid: str) -> tuple[str, Order]:
    cycle, unit, n = uid.split(".")
    return unit, (int(cycle), int(n))


@dataclass
class Replay:
    """The journals replayed in order against the unit-of-order rules."""

    stored: dict[str, set[Order]]  # per unit: every message received at some point
    consumed: set[str] = field(default_factory=set)
    settling: dict[str, str] = field(default_factory=dict)  # uid -> holder, a settlement begun
    maybe: set[str] = field(default_factory=set)  # settling at a kill: consumed or not
    held: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))  # unit -> uid -> holder
    receipts: dict[str, list[tuple[bool, int]]] = field(default_factory=lambda: defaultdict(list))
    sent: set[str] = field(default_factory=set)
    redelivered_after_crash: int = 0
    receipts_count: int = 0
    drained: dict[str, int] | None = None
    problems: list[str] = field(default_factory=list)
    last_cycle: dict[str, int] = field(default_factory=dict)  # uid -> the run that last received it
    crashes_between: bool = False  # the receipt being replayed follows a restart since the last one

    def crash(self) -> None:
        """A new run: nothing is held; a settlement in progress may or may not have happened."""
        self.held.clear()
        self.maybe.update(self.settling)
        self.settling.clear()

    def receipt(self, where: str, holder: str, uid: str, redelivered: bool, count: int) -> None:
        unit, order = parse_uid(uid)
        held = self.held[unit]
        others = {h for h in held.values() if h != holder}
        if others:  # rule 1
            self.problems.append(f"{where}: {holder} got {uid} while {sorted(others)} hold {sorted(held)}")
        for earlier in sorted(o for o in self.stored[unit] if o < order):  # rule 2
            e = f"{earlier[0]}.{unit}.{earlier[1]}"
            if e in self.consumed or e in self.maybe or held.get(e) == holder or e in self.settling:
                continue
            self.problems.append(f"{where}: {holder} got {uid} before {e}")
            break
        if uid in self.consumed:  # rule 3
            self.problems.append(f"{where}: {uid} received after it was consumed")
        before = self.receipts[uid]
        if before:
            if not redelivered or count <= before[-1][1]:
                self.problems.append(f"{where}: {uid} again without redelivered or a higher count: {count}")
            if redelivered and self.crashes_between:
                self.redelivered_after_crash += 1
        before.append((redelivered, count))
        self.maybe.discard(uid)
        held[uid] = holder
        self.receipts_count += 1

    def apply(self, cycle: int, lines: list[str]) -> None:
        self.crash()
        for number, line in enumerate(lines, 1):
            where = f"cycle {cycle} line {number}"
            word, *args = line.split(" ")
            if word in ("RECOVERED", "SENDING"):
                pass
            elif word == "SENT":
                self.sent.update(args)
            elif word == "RECV":
                holder, uid, redelivered, count = args
                self.crashes_between = self.last_cycle.get(uid, cycle) != cycle
                self.last_cycle[uid] = cycle
                self.receipt(where, holder, uid, redelivered == "1", int(count))
            elif word in ("SETTLING", "RELEASING"):
                holder = args[0]
                for uid in args[1:]:
                    unit, _ = parse_uid(uid)
                    if self.held[unit].get(uid) != holder:
                        self.problems.append(f"{where}: {holder} {word} {uid}, which it does not hold")
                    self.held[unit].pop(uid, None)
                    if word == "SETTLING":
                        self.settling[uid] = holder
            elif word == "SETTLED":
                for uid in args[1:]:
                    self.settling.pop(uid, None)
                    self.consumed.add(uid)
            elif word == "DRAINED":
                self.drained = {"received": int(args[0]), **json.loads(args[1])}
            elif word in ("FAILED", "ERROR"):
                raise AssertionError(f"{where}: {line}")
            else:
                raise AssertionError(f"{where}: unknown journal line {line!r}")


def stored_units(journals: list[list[str]]) -> dict[str, set[Order]]:
    stored: dict[str, set[Order]] = defaultdict(set)
    for lines in journals:
        for line in lines:
            if line.startswith("RECV "):
                unit, order = parse_uid(line.split(" ")[2])
                stored[unit].add(order)
    return stored


def test_units_of_order_survive_sigkill_in_order_and_once_or_redelivered(tmp_path: Path) -> None:
    directory = tmp_path / "server"
    rng = random.Random(int(os.environ.get("JMSSTORE_CRASH_SEED", "20261126")))
    n = crash_cycles(6, 100)
    journals = list(crash_journals(SCRIPT, directory, tmp_path, n, rng))

    replay = Replay(stored_units(journals))
    for cycle, lines in enumerate(journals):
        replay.apply(cycle, lines)
    assert replay.drained is not None and replay.drained["left"] == 0, replay.drained
    lost = sorted(replay.sent - set(replay.receipts))
    assert not lost, f"{len(lost)} sent messages never received: {lost[:10]}"
    assert not replay.problems, f"{len(replay.problems)} violations, first ones:\n" + "\n".join(replay.problems[:20])
    # The run meant something: messages of every unit went through, some came back after a crash.
    assert len(replay.sent) > n * 30, f"only {len(replay.sent)} messages sent"
    assert all(len(replay.stored[u]) > n * 3 for u in ("u0", "u1", "u2", "u3", "u4")), {
        u: len(s) for u, s in replay.stored.items()
    }
    assert replay.redelivered_after_crash > 0, "no message was redelivered after a crash"
