"""Broker crash test with real SIGKILL (JMS 2.0 §6.2.11: a message is
delivered once, or redelivered with ``JMSRedelivered`` set; an acknowledged
or committed receive never comes back; a sent persistent message is never
lost; a transaction is all or nothing).

Each cycle starts ``broker_crash_child.py`` on the same server directory:
producers (sync, async, transacted) send to a queue and a topic with two
durable subscriptions while consumers (AUTO, CLIENT, transacted, DUPS_OK;
``receive`` or listeners) receive, acknowledge, commit, recover, roll back
and close their sessions; after a random 0.3-1.5 s the child is killed with
SIGKILL (one cycle in ten right after it starts opening the server, so
kills also land in recovery). A last run drains everything with AUTO
consumers and closes cleanly. The journals the children wrote (see the
child's docstring) are checked against the invariants in
:meth:`History.check`: (1) every sent message is received (on every
subscription it was routed to); (2) every receipt after a message's first
has ``redelivered`` set and a higher delivery count; (3) an acknowledged or
committed receipt is the message's last; (4) only what was sent, or may
have been (in flight at the kill), arrives: never a rolled-back or
uncommitted message; a send and a producer transaction are all or nothing.
Each restart's ``recovered`` message counts must lie between what was sent
and never received, and what was not yet surely consumed. 20 cycles
normally; ``JMSSTORE_LONG=1`` runs 200 (or ``JMSSTORE_CRASH_CYCLES``;
``JMSSTORE_CRASH_SEED`` picks the random choices).
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_crash_child import DURABLE, QUEUE, SHARED, SUBS_OF
from crash_helpers import crash_cycles, crash_journals
from jmsstore.broker import JMSServer

SCRIPT = "broker_crash_child.py"


Key = tuple[str, str]  # (subscription or queue, uid)


def keys(uids: list[str]) -> list[Key]:
    """Where each message goes: the queue, or both subscriptions of the topic."""
    return [(sub, uid) for uid in uids for sub in SUBS_OF[uid[-1]]]


@dataclass
class Receipt:
    where: str  # "cycle C line L" of the journals, for messages
    redelivered: bool
    delivery_count: int
    mode: str


@dataclass
class History:
    """Everything the journals say, in order."""

    attempted: set[str] = field(default_factory=set)  # non-transacted: SENDING
    committing: set[str] = field(default_factory=set)  # transacted: reached COMMITTING
    batches: list[list[str]] = field(default_factory=list)  # COMMITTING lines
    sent: set[str] = field(default_factory=set)
    rolled_back: set[str] = field(default_factory=set)
    receipts: dict[Key, list[Receipt]] = field(default_factory=lambda: defaultdict(list))
    consumed: dict[Key, int] = field(default_factory=dict)  # ACKED/RCOMMITTED: index of the receipt consumed
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    # What a restart must find in the store (sent, never received) and may find (not known consumed).
    must: set[Key] = field(default_factory=set)
    may: set[Key] = field(default_factory=set)
    redelivered_after_crash: int = 0
    drained: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)  # violations seen while reading

    def apply(self, cycle: int, lines: list[str]) -> None:
        for number, line in enumerate(lines, 1):
            where = f"cycle {cycle} line {number}"
            word, *args = line.split(" ")
            if word == "RECOVERED":
                self.recoveries.append(dict(json.loads(args[0]), cycle=cycle))
                self.check_recovery(self.recoveries[-1])
            elif word == "SENDING":
                self.attempted.add(args[0])
                self.may.update(keys(args))
            elif word == "COMMITTING":
                self.committing.update(args)
                self.batches.append(args)
                self.may.update(keys(args))
            elif word == "SENT":
                assert self.attempted.issuperset(args) or self.committing.issuperset(args), f"{where}: {line}"
                self.sent.update(args)
                self.must.update(k for k in keys(args) if k not in self.receipts)
            elif word == "ROLLEDBACK":
                assert not self.committing.intersection(args), f"{where}: rolled back after COMMITTING: {line}"
                self.rolled_back.update(args)
            elif word == "RECV":
                sub, uid, redelivered, count, mode = args
                receipts = self.receipts[sub, uid]
                if receipts and int(redelivered) and not receipts[-1].where.startswith(f"cycle {cycle} "):
                    self.redelivered_after_crash += 1
                receipts.append(Receipt(where, redelivered == "1", int(count), mode))
                self.must.discard((sub, uid))
            elif word in ("ACKED", "RCOMMITTED"):
                sub = args[0]
                for uid in args[1:]:
                    held = self.receipts.get((sub, uid))
                    assert held, f"{where}: {word} of {sub} {uid}, never received"
                    first = self.consumed.get((sub, uid))
                    if first is not None:  # (3)
                        self.problems.append(
                            f"{sub} {uid} {word} at {where}, but it was consumed at {held[first].where}"
                        )
                        continue
                    self.consumed[sub, uid] = len(held) - 1
                    self.may.discard((sub, uid))
            elif word in ("RECOVERING", "RROLLEDBACK", "CLOSING"):
                pass
            elif word == "DRAINED":
                self.drained = {"received": int(args[0]), "left": json.loads(args[1])}
            elif word in ("FAILED", "ERROR"):
                raise AssertionError(f"{where}: {line}")
            else:
                raise AssertionError(f"{where}: unknown journal line {line!r}")

    def check_recovery(self, recovered: dict[str, Any]) -> None:
        """A restart recovered every message that must be there, and nothing consumed or never sent."""
        cycle = recovered["cycle"]
        assert recovered["stale_records_removed"] >= 0 and recovered["in_doubt_deliveries"] >= 0, recovered
        if len(self.recoveries) == 1:
            return  # the first start that got this far: nothing was sent before it
        assert (recovered["queues"], recovered["topics"], recovered["durable_subscriptions"]) == (1, 1, 2), recovered
        must = Counter(sub for sub, _ in self.must)
        may = Counter(sub for sub, _ in self.may)
        for sub in (QUEUE, DURABLE, SHARED):
            found = recovered["counts"][sub]
            assert must[sub] <= found <= may[sub], (
                f"cycle {cycle}: {sub} recovered {found} messages; {must[sub]} sent and never received, "
                f"at most {may[sub]} possibly there: {recovered}"
            )

    def check(self) -> None:
        problems = list(self.problems)
        # (1) every sent message was received, on every subscription it was routed to
        for uid in sorted(self.sent):
            for sub in SUBS_OF[uid[-1]]:
                if (sub, uid) not in self.receipts:
                    problems.append(f"sent {uid} never received on {sub}")
        for (sub, uid), receipts in self.receipts.items():
            first = receipts[0]
            # (2) a message is delivered once, or again with redelivered set (and its delivery count raised)
            for before, again in itertools.pairwise(receipts):
                if not again.redelivered:
                    problems.append(f"{sub} {uid} received again without redelivered at {again.where}: {receipts}")
                if again.delivery_count <= before.delivery_count:
                    problems.append(f"{sub} {uid} delivery count did not rise at {again.where}: {receipts}")
            for r in receipts:
                if r.redelivered != (r.delivery_count > 1):
                    problems.append(f"{sub} {uid} redelivered={r.redelivered} with delivery count {r.delivery_count}")
            # (3) an acknowledged or committed receive is the last one
            consumed = self.consumed.get((sub, uid))
            if consumed is not None and consumed != len(receipts) - 1:
                problems.append(
                    f"{sub} {uid} came back after it was consumed at {receipts[consumed].where}: {receipts}"
                )
            # (4) only what was sent (or may have been) arrives; never a rolled-back or uncommitted message
            if sub not in SUBS_OF.get(uid[-1:], ()):
                problems.append(f"{uid} received on {sub} at {first.where}: not routed there")
            elif uid.split(".")[1].startswith("t"):
                if uid in self.rolled_back:
                    problems.append(f"rolled-back {uid} received on {sub} at {first.where}")
                elif uid not in self.committing:
                    problems.append(f"{uid} received on {sub} at {first.where}, but was never committed")
            elif uid not in self.attempted:
                problems.append(f"{uid} received on {sub} at {first.where}, but was never sent")
        # A send (to all its subscriptions) and a producer transaction are all or nothing.
        groups = [[uid] for uid in self.attempted] + self.batches
        for group in groups:
            routed = keys(group)
            got = [k for k in routed if k in self.receipts]
            if got and len(got) != len(routed):
                problems.append(f"half a send or transaction arrived: {sorted(got)} of {sorted(routed)}")
        assert not problems, f"{len(problems)} violations, first ones:\n" + "\n".join(problems[:20])


def test_broker_sigkill_loses_nothing_and_delivers_once_or_redelivered(tmp_path: Path) -> None:
    directory = tmp_path / "server"
    rng = random.Random(int(os.environ.get("JMSSTORE_CRASH_SEED", "20261122")))
    history = History()
    n = crash_cycles(20, 200)
    for cycle, journal in enumerate(crash_journals(SCRIPT, directory, tmp_path, n, rng)):
        history.apply(cycle, journal)
    assert history.drained is not None, "the drain run did not finish"
    assert history.drained["left"] == {QUEUE: 0, DURABLE: 0, SHARED: 0}, history.drained
    history.check()
    # After the clean close nothing is left, not even a delivery record.
    with JMSServer(directory, name="jms1", max_segment_bytes=1 << 20) as server:
        assert server.recovered["messages"] == 0, server.recovered
        assert server.recovered["in_doubt_deliveries"] == 0, server.recovered
    # The run meant something: messages were sent, consumed, and came back after crashes.
    assert len(history.sent) > n * 50, f"only {len(history.sent)} messages sent"
    assert len(history.consumed) > n * 20, f"only {len(history.consumed)} receives acknowledged or committed"
    assert len([r for r in history.recoveries if r["in_doubt_deliveries"]]) > n // 4, history.recoveries
    assert history.redelivered_after_crash > 0, "no message was redelivered after a crash"
