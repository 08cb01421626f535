"""The paging engine against a plain-Python reference model (hypothesis, stateful).

The model holds, per destination, a list of message records (header fields,
reserved flag, body, file-store handle if persistent) and the destination's
order. Random sequences of create-destination, add (in memory, persistent
with the body, persistent with the body only in the store), bursts of large
bodies, take/next with a clock that never goes back, release, remove,
expire, bad calls and "reopen" (a new Pager on the same store, every
message re-added) run against both; after every step the pager must agree
with the model on order, contents, headers, counts, the next deliverable
message, the expired list and the statistics, and keep its resident bodies
within the budget. The budget is drawn per run from 0, 2 KiB, 64 KiB and
10**9 bytes, so most runs page hard.

The model's order (``ordered``): FIFO by arrival; LIFO by reverse arrival;
``priority``/``-priority`` by priority descending then arrival; a field,
ascending or (with ``-``) descending, then arrival (FIFO ties both ways);
expiration 0 (never) sorts as later than every expiration time. Arrival is
the order of ``add`` calls; a reopen re-adds in arrival order, so it keeps
every destination's order. Keys change on reopen: the model maps each
message to its current key.

``JMSSTORE_LONG=1`` runs 500 examples instead of 30.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from jmsstore import FileStore, InvalidArgumentError, Pager, UnknownHandleError

LONG = bool(os.environ.get("JMSSTORE_LONG"))
HUGE = 10**9
BUDGETS = [0, 2048, 65536, HUGE]
FIELDS = ["timestamp", "expiration", "delivery_time", "priority", "redelivery_count", "id"]
ORDERS = ["fifo", "lifo", "priority", *(f for f in FIELDS if f != "priority"), *(f"-{f}" for f in FIELDS), "+priority"]
NEVER = 1 << 63  # where expiration 0 sorts: after every expiration time
MAX_DESTINATIONS = 4
COLLECTION = "pager-model"
START = 1_000_000  # the model clock's start (ms)

Header = dict[str, Any]


@dataclass(eq=False)
class Msg:
    """One message of the model."""

    arrival: int
    dest: str
    id: int
    priority: int
    timestamp: int
    expiration: int
    delivery_time: int
    redelivery_count: int
    correlation_id: str | None
    type: str | None
    unit_of_order: str | None
    body: bytes = field(repr=False)
    store_handle: int | None  # persistent: the file-store record holding the body
    stored_only: bool  # added with add_stored: the pager never had the body
    key: int = -1
    reserved: bool = False

    def __repr__(self) -> str:
        return f"Msg(#{self.arrival} {self.dest} key={self.key} {len(self.body)}B)"


@dataclass
class Dest:
    id: int
    order: str
    created: int  # creation sequence, to re-create in the same order on reopen


def sort_key(m: Msg, order: str) -> tuple[int, ...]:
    if order == "fifo":
        return (m.arrival,)
    if order == "lifo":
        return (-m.arrival,)
    if order in ("priority", "-priority"):
        return (-m.priority, m.arrival)
    name = order.lstrip("+-")
    value = getattr(m, name)
    if name == "expiration" and value == 0:
        value = NEVER
    return (-value if order.startswith("-") else value, m.arrival)


def deliverable(m: Msg, now: int) -> bool:
    return not m.reserved and m.delivery_time <= now and (m.expiration == 0 or m.expiration > now)


def make_body(seq: int, size: int, compressible: bool) -> bytes:
    if compressible:
        unit = b"<msg seq='%d'><item>widget</item><qty>3</qty></msg>" % seq
        return (unit * (size // len(unit) + 1))[:size]
    return random.Random(seq).randbytes(size)


# Filters on header fields, by name (so that hypothesis prints them readably).
FILTERS: dict[str, Callable[[Header], bool]] = {
    "high": lambda h: bool(h["priority"] >= 5),
    "corr-a": lambda h: h["correlation_id"] == "a",
    "not-t1": lambda h: h["type"] != "t1",
    "first-delivery": lambda h: h["redelivery_count"] == 0,
}


class PagerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="jmsstore-pager-model-"))
        self.paging_dir = self.dir / "paging"
        self.store: FileStore | None = None
        self.pager: Pager | None = None
        self.options: dict[str, Any] = {}
        self.dests: dict[str, Dest] = {}
        self.msgs: dict[int, Msg] = {}  # arrival -> message
        self.arrivals = 0
        self.clock = START
        self.dead_keys: list[int] = []
        self.counters: dict[str, int] = {}
        self.non_persistent_seen = False  # a body that may have gone to a paging file, since this pager opened

    # ---- set-up -------------------------------------------------------------------------------

    @initialize(
        budget=st.sampled_from(BUDGETS),
        codec=st.sampled_from(["none", "lzf", "zstd"]),
        read_ahead=st.sampled_from([0, 1, 16]),
        with_store=st.booleans(),
        order=st.sampled_from(ORDERS),
    )
    def start(self, budget: int, codec: str, read_ahead: int, with_store: bool, order: str) -> None:
        if with_store:
            self.store = FileStore(
                self.dir / "store", max_segment_bytes=1 << 20, sync_policy="disabled", preallocate=False
            )
        self.options = {
            "message_buffer_size": budget,
            "paging_directory": str(self.paging_dir),
            "paging_codec": codec,
            "read_ahead": read_ahead,
        }
        self.pager = Pager(self.store, **self.options)
        self._create("d0", order)

    def teardown(self) -> None:
        if self.pager is not None:
            self.pager.close()
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def p(self) -> Pager:
        assert self.pager is not None
        return self.pager

    @property
    def budget(self) -> int:
        return int(self.options["message_buffer_size"])

    def _create(self, name: str, order: str) -> None:
        dest_id = self.p.create_destination(name, order=order)
        assert type(dest_id) is int
        assert dest_id not in {d.id for d in self.dests.values()}
        self.dests[name] = Dest(dest_id, order, len(self.dests))

    def ordered(self, name: str) -> list[Msg]:
        order = self.dests[name].order
        return sorted((m for m in self.msgs.values() if m.dest == name), key=lambda m: sort_key(m, order))

    def expected_next(self, name: str, now: int, filt: Callable[[Header], bool] | None) -> Msg | None:
        for m in self.ordered(name):
            if deliverable(m, now) and (filt is None or filt(self.expected_header(m))):
                return m
        return None

    def expected_header(self, m: Msg) -> Header:
        """The header fields the pager must report (all but location)."""
        return {
            "id": m.id,
            "priority": m.priority,
            "timestamp": m.timestamp,
            "expiration": m.expiration,
            "delivery_time": m.delivery_time,
            "redelivery_count": m.redelivery_count,
            "correlation_id": m.correlation_id,
            "type": m.type,
            "unit_of_order": m.unit_of_order,
            "body_size": len(m.body),
            "reserved": m.reserved,
        }

    def _by_key(self) -> dict[int, Msg]:
        return {m.key: m for m in self.msgs.values()}

    def _pick(self, data: st.DataObject, msgs: list[Msg], label: str) -> Msg:
        arrival = data.draw(st.sampled_from(sorted(m.arrival for m in msgs)), label=label)
        return self.msgs[arrival]

    def _advance(self, data: st.DataObject, most: int = 25) -> int:
        self.clock += data.draw(st.integers(0, most), label="advance")
        return self.clock

    def _add(self, m: Msg, mode: str) -> None:
        """Gives ``m`` to the pager: ``memory`` (non-persistent), ``persistent`` (body and store
        handle) or ``stored`` (store handle and size only)."""
        headers = {
            "id": m.id,
            "priority": m.priority,
            "timestamp": m.timestamp,
            "expiration": m.expiration,
            "delivery_time": m.delivery_time,
            "redelivery_count": m.redelivery_count,
            "correlation_id": m.correlation_id,
            "type": m.type,
            "unit_of_order": m.unit_of_order,
        }
        dest_id = self.dests[m.dest].id
        if mode == "stored":
            assert m.store_handle is not None
            m.key = self.p.add_stored(dest_id, m.store_handle, len(m.body), **headers)
        else:
            m.key = self.p.add(dest_id, m.body, store_handle=m.store_handle, **headers)
        m.stored_only = mode == "stored"
        assert type(m.key) is int
        if m.store_handle is None:
            self.non_persistent_seen = True

    def _new(self, data: st.DataObject, name: str, size: int, mode: str) -> Msg:
        seq = self.arrivals
        self.arrivals += 1
        body = make_body(seq, size, data.draw(st.booleans(), label="compressible"))
        handle = None
        if mode != "memory":
            assert self.store is not None
            handle = self.store.put(COLLECTION, body)
        never_expires = data.draw(st.booleans(), label="never_expires")
        due_now = data.draw(st.booleans(), label="due_now")
        m = Msg(
            arrival=seq,
            dest=name,
            id=(seq * 2654435761) % (1 << 32),  # unique, not in arrival order
            priority=data.draw(st.integers(0, 9), label="priority"),
            timestamp=START + data.draw(st.integers(0, 3), label="timestamp") * 10,
            expiration=0 if never_expires else self.clock + data.draw(st.integers(-5, 60), label="expiration"),
            delivery_time=0 if due_now else self.clock + data.draw(st.integers(-5, 40), label="delivery_time"),
            redelivery_count=data.draw(st.integers(0, 2), label="redelivery_count"),
            correlation_id=data.draw(st.sampled_from([None, "a", "b"]), label="correlation_id"),
            type=data.draw(st.sampled_from([None, "t1"]), label="type"),
            unit_of_order=data.draw(st.sampled_from([None, "u1", "u2"]), label="unit_of_order"),
            body=body,
            store_handle=handle,
            stored_only=mode == "stored",
        )
        self._add(m, mode)
        self.msgs[seq] = m
        return m

    def _modes(self) -> list[str]:
        return ["memory", "persistent", "stored"] if self.store is not None else ["memory"]

    # ---- rules --------------------------------------------------------------------------------

    @precondition(lambda self: len(self.dests) < MAX_DESTINATIONS)
    @rule(order=st.sampled_from(ORDERS))
    def create_destination(self, order: str) -> None:
        self._create(f"d{len(self.dests)}", order)

    @rule(data=st.data(), size=st.one_of(st.integers(0, 64), st.integers(0, 3000)))
    def add(self, data: st.DataObject, size: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.dests)), label="dest")
        self._new(data, name, size, data.draw(st.sampled_from(self._modes()), label="mode"))

    @rule(data=st.data(), n=st.integers(3, 8))
    def pressure(self, data: st.DataObject, n: int) -> None:
        """A burst of large bodies."""
        name = data.draw(st.sampled_from(sorted(self.dests)), label="dest")
        mode = data.draw(st.sampled_from(self._modes()), label="mode")
        for _ in range(n):
            self._new(data, name, data.draw(st.integers(1500, 3000), label="size"), mode)

    @rule(data=st.data(), use_take=st.booleans(), filter_name=st.sampled_from([None, *FILTERS]))
    def take(self, data: st.DataObject, use_take: bool, filter_name: str | None) -> None:
        name = data.draw(st.sampled_from(sorted(self.dests)), label="dest")
        now = self._advance(data)
        filt = FILTERS[filter_name] if filter_name else None
        expected = self.expected_next(name, now, filt)
        dest_id = self.dests[name].id
        if use_take:
            got = self.p.take(dest_id, now, filter=filt)
            if expected is None:
                assert got is None, f"take({name}, {now}) gave {got}, the model has nothing deliverable"
                return
            assert got is not None, f"take({name}, {now}) gave None, the model expects {expected}"
            assert got[0] == expected.key, f"took {self._by_key().get(got[0])}, expected {expected}"
            assert got[1] == expected.body
        else:
            key = self.p.next(dest_id, now, filter=filt)
            assert key == (None if expected is None else expected.key), (self._by_key().get(key), expected)
        if expected is not None:
            expected.reserved = True

    @rule(data=st.data(), filter_name=st.sampled_from([None, *FILTERS]))
    def peek(self, data: st.DataObject, filter_name: str | None) -> None:
        name = data.draw(st.sampled_from(sorted(self.dests)), label="dest")
        now = self._advance(data)
        filt = FILTERS[filter_name] if filter_name else None
        expected = self.expected_next(name, now, filt)
        key = self.p.next(self.dests[name].id, now, reserve=False, filter=filt)
        assert key == (None if expected is None else expected.key), (self._by_key().get(key), expected)

    @precondition(lambda self: any(m.reserved for m in self.msgs.values()))
    @rule(data=st.data(), redelivered=st.booleans())
    def release(self, data: st.DataObject, redelivered: bool) -> None:
        m = self._pick(data, [m for m in self.msgs.values() if m.reserved], "reserved")
        self.p.release(m.key, redelivered=redelivered)
        m.reserved = False
        if redelivered:
            m.redelivery_count += 1

    @precondition(lambda self: bool(self.msgs))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        m = self._pick(data, list(self.msgs.values()), "message")
        self.p.remove(m.key)
        del self.msgs[m.arrival]
        self.dead_keys.append(m.key)

    @rule(data=st.data(), limit=st.sampled_from([1, 3, 1000]))
    def expire(self, data: st.DataObject, limit: int) -> None:
        now = self._advance(data, 40)
        keys = self.p.expired(now, limit=limit)
        self.check_expired(keys, now, limit)
        by_key = self._by_key()
        for k in keys:
            if data.draw(st.booleans(), label="remove it"):
                self.p.remove(k)
                del self.msgs[by_key[k].arrival]
                self.dead_keys.append(k)

    @rule()
    def reopen(self) -> None:
        """A new pager on the same store: destinations re-created, every message re-added in arrival
        order (persistent ones with ``add_stored``), reservations gone."""
        self.p.close()
        self.pager = Pager(self.store, **self.options)
        self.counters = {}
        self.non_persistent_seen = False
        self.dead_keys = []
        for name, d in sorted(self.dests.items(), key=lambda kv: kv[1].created):
            del self.dests[name]
            self._create(name, d.order)
        for arrival in sorted(self.msgs):
            m = self.msgs[arrival]
            m.reserved = False
            self._add(m, "memory" if m.store_handle is None else "stored")

    @rule(data=st.data(), case=st.sampled_from(["priority", "destination", "duplicate", "order", "key", "name"]))
    def bad_call(self, data: st.DataObject, case: str) -> None:
        """A bad call raises a typed error and changes nothing (the invariants check the contents)."""
        p = self.p
        name = data.draw(st.sampled_from(sorted(self.dests)), label="dest")
        dest_id = self.dests[name].id
        unknown_dest = max(d.id for d in self.dests.values()) + 1000
        live = {m.key for m in self.msgs.values()}
        dead = [k for k in self.dead_keys if k not in live]
        before = p.stats()
        exc: type[Exception] = UnknownHandleError if case == "key" else InvalidArgumentError
        with pytest.raises(exc):
            if case == "priority":
                p.add(dest_id, b"x" * 100, id=1, priority=data.draw(st.sampled_from([-1, 10, 255]), label="priority"))
            elif case == "destination":
                p.add(unknown_dest, b"x" * 100, id=1)
            elif case == "duplicate":
                p.create_destination(name, order=data.draw(st.sampled_from(ORDERS), label="order"))
            elif case == "order":
                p.create_destination("never-created", order="sideways")
            elif case == "key":
                p.remove(dead[-1] if dead else max(live, default=0) + 1_000_003)
            else:
                p.destination("never-created")
        assert p.stats() == before

    # ---- invariants ---------------------------------------------------------------------------

    def check_expired(self, keys: list[int], now: int, limit: int) -> None:
        by_key = self._by_key()
        assert all(k in by_key for k in keys), f"expired() gave unknown keys {set(keys) - set(by_key)}"
        got = [by_key[k] for k in keys]
        assert len(set(keys)) == len(keys)
        expected = [m for m in self.msgs.values() if 0 < m.expiration <= now]
        assert len(got) == min(limit, len(expected)), (now, limit, got, expected)
        exps = [m.expiration for m in got]
        assert exps == sorted(exps), f"expired() not earliest first: {exps}"
        assert all(0 < e <= now for e in exps)
        if got:  # nothing expiring earlier than the last listed one was left out
            last = exps[-1]
            assert {m for m in expected if m.expiration < last} <= set(got)

    @invariant()
    def agrees_with_model(self) -> None:
        p = self.p
        assert p.stats()["destinations"] == len(self.dests)
        for name, d in self.dests.items():
            assert p.destination(name) == d.id
            expected = self.ordered(name)
            keys: list[int] = []
            after: int | None = None
            while True:  # browse 7 at a time, to exercise pagination
                chunk = p.browse(d.id, after=after, limit=7)
                keys += chunk
                if len(chunk) < 7:
                    break
                after = chunk[-1]
            assert keys == [m.key for m in expected], (
                f"{name} ({d.order}): browse gave {[self._by_key().get(k) for k in keys]}, model {expected}"
            )
            assert p.count(d.id) == len(expected)
            for filter_name in (None, "high"):
                filt = FILTERS[filter_name] if filter_name else None
                want = self.expected_next(name, self.clock, filt)
                got = p.next(d.id, self.clock, reserve=False, filter=filt)
                assert got == (None if want is None else want.key), (name, filter_name, want)
        # bodies first (reading them may page others in and out), then headers and stats together
        for m in self.msgs.values():
            assert p.body(m.key) == m.body, m
        headers = {m.arrival: p.header(m.key) for m in self.msgs.values()}
        stats = p.stats()
        for arrival, h in headers.items():
            m = self.msgs[arrival]
            assert {k: h[k] for k in self.expected_header(m)} == self.expected_header(m), m
            assert h["destination"] in (self.dests[m.dest].id, m.dest)
            assert h["location"] in (("memory", "store") if m.store_handle is not None else ("memory", "paged")), m
            if len(m.body) > self.budget:
                assert h["location"] != "memory", f"{m}: larger than the budget and resident"
            if self.budget == HUGE and not m.stored_only:
                assert h["location"] == "memory", f"{m}: paged out with room in the budget"
        self.check_stats(stats, list(headers.values()))
        self.check_expired(p.expired(self.clock), self.clock, 1000)

    def check_stats(self, s: dict[str, Any], headers: list[Header]) -> None:
        resident = [h for h in headers if h["location"] == "memory"]
        paged = [h for h in headers if h["location"] == "paged"]
        assert s["messages"] == len(self.msgs) == len(headers)
        assert s["message_buffer_size"] == self.budget
        assert s["resident_messages"] == len(resident)
        assert s["resident_bytes"] == sum(h["body_size"] for h in resident)
        assert s["paged_messages"] == len(paged)
        assert s["paged_bytes"] == sum(h["body_size"] for h in paged)
        assert s["store_paged_messages"] == sum(1 for h in headers if h["location"] == "store")
        assert s["resident_bytes"] <= self.budget, s
        if not self.non_persistent_seen:
            assert s["paging_file_bytes"] == 0, "a persistent body was written to a paging file"
        if self.budget == HUGE:
            assert s["page_outs"] == 0
        if self.options["read_ahead"] == 0:
            assert s["read_ahead_hits"] == 0
        for name in ("page_outs", "page_ins", "read_ahead_hits"):  # counters never go back (within a pager)
            assert s[name] >= self.counters.get(name, 0), name
            self.counters[name] = s[name]


PagerModel.TestCase.settings = settings(
    max_examples=500 if LONG else 30,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
TestPagerModel = PagerModel.TestCase
