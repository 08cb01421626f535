"""The paging engine (``jmsstore.Pager``), example by example.

Destination order for every order kind; what ``next``/``take`` skip (not yet
due, reserved, expired, filtered out); release and the redelivery count;
bodies read back from memory, from paging files and from the file store;
``expired``; ``browse`` pagination; the statistics and the residency rules;
the paging directory; paging codecs; and bad input, which raises a typed
error and changes nothing.

Interpretations of the API contract these tests rely on (see also
``test_pager_model.py``, which uses the same ones):

- ``id`` is an int; ``header()["destination"]`` is the destination's id or name;
- a released message keeps its place in its destination (FIFO position,
  arrival order among equal sort keys); a destination sorted on
  ``redelivery_count`` re-sorts a message whose count a release raised;
- ``"priority"`` and ``"-priority"`` are the same order (higher first);
  ``"+priority"`` is ascending (a leading ``+`` is accepted for every field);
- ``expiration`` 0 (never) sorts after every expiration time when ascending;
- stats count each message once, by location: ``resident_*`` the bodies in
  ``"memory"``, ``paged_*`` those in paging files (``"paged"``),
  ``store_paged_messages`` those only in the store (``"store"``); byte figures
  are uncompressed body sizes;
- a paging directory that does not exist yet is created; one equal to the
  store's directory counts as inside it.
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, InvalidArgumentError, JmsStoreError, Pager, UnknownHandleError, _native

HEADER_KEYS = {
    "id",
    "destination",
    "priority",
    "timestamp",
    "expiration",
    "delivery_time",
    "redelivery_count",
    "correlation_id",
    "type",
    "unit_of_order",
    "body_size",
    "location",
    "reserved",
}
STATS_KEYS = {
    "messages",
    "resident_messages",
    "resident_bytes",
    "paged_messages",
    "paged_bytes",
    "store_paged_messages",
    "paging_file_bytes",
    "page_outs",
    "page_ins",
    "read_ahead_hits",
    "filter_body_reads",
    "message_buffer_size",
    "destinations",
}
LOCATIONS = {"memory", "store", "paged"}
SMALL_BUDGET = 4096
HUGE_BUDGET = 10**9

MakePager = Callable[..., Pager]


# --- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def paging_dir(tmp_path: Path) -> Path:
    return tmp_path / "paging"


@pytest.fixture
def make_pager(paging_dir: Path) -> Iterator[MakePager]:
    """``make_pager(store=None, **options)``: a Pager (paging directory ``paging_dir``), closed at teardown."""
    opened: list[Pager] = []

    def make(store: FileStore | None = None, **options: Any) -> Pager:
        options.setdefault("paging_directory", str(paging_dir))
        pager = Pager(store, **options)
        opened.append(pager)
        return pager

    yield make
    for pager in opened:
        with contextlib.suppress(JmsStoreError):  # a test may have closed it already
            pager.close()


def browse_all(pager: Pager, dest: int, limit: int = 1000) -> list[int]:
    """Every key of ``dest`` in destination order, ``limit`` at a time."""
    keys: list[int] = []
    after: int | None = None
    while True:
        chunk = pager.browse(dest, after=after, limit=limit)
        keys += chunk
        if len(chunk) < limit:
            return keys
        after = chunk[-1]


def body_of(i: int, size: int = 1000) -> bytes:
    """A distinct, incompressible body."""
    return random.Random(i).randbytes(size)


def compressible(i: int, size: int = 2000) -> bytes:
    unit = b'{"order": %d, "item": "widget", "qty": 3, "status": "NEW"} ' % i
    return (unit * (size // len(unit) + 1))[:size]


def locations(pager: Pager, keys: list[int]) -> list[str]:
    return [pager.header(k)["location"] for k in keys]


def check_stats(pager: Pager, keys: list[int], budget: int) -> dict[str, Any]:
    """The statistics agree with the headers of ``keys`` (every live message) and the budget holds."""
    headers = [pager.header(k) for k in keys]
    s = pager.stats()
    assert set(s) >= STATS_KEYS, STATS_KEYS - set(s)
    assert s["message_buffer_size"] == budget
    assert s["messages"] == len(keys)
    assert all(h["location"] in LOCATIONS for h in headers)
    resident = [h for h in headers if h["location"] == "memory"]
    paged = [h for h in headers if h["location"] == "paged"]
    assert s["resident_messages"] == len(resident)
    assert s["resident_bytes"] == sum(h["body_size"] for h in resident)
    assert s["paged_messages"] == len(paged)
    assert s["paged_bytes"] == sum(h["body_size"] for h in paged)
    assert s["store_paged_messages"] == sum(1 for h in headers if h["location"] == "store")
    assert s["resident_messages"] + s["paged_messages"] + s["store_paged_messages"] == s["messages"]
    assert s["resident_bytes"] <= budget
    # a body larger than the whole budget is never resident
    assert all(h["location"] != "memory" for h in headers if h["body_size"] > budget)
    for counter in ("paging_file_bytes", "page_outs", "page_ins", "read_ahead_hits"):
        assert isinstance(s[counter], int) and s[counter] >= 0, counter
    return s


def drain(pager: Pager, dest: int, now: int = 0) -> list[tuple[int, bytes]]:
    """take + remove until the destination has nothing deliverable."""
    out: list[tuple[int, bytes]] = []
    while (got := pager.take(dest, now)) is not None:
        key, body = got
        out.append((key, body))
        pager.remove(key)
    return out


def assert_prefix_resident(pager: Pager, dest: int) -> list[str]:
    """The resident bodies are the ones nearest delivery: a prefix of the destination order."""
    locs = locations(pager, browse_all(pager, dest))
    first_paged = locs.index("paged") if "paged" in locs else len(locs)
    assert all(loc == "paged" for loc in locs[first_paged:]), locs
    assert locs[0] == "memory", locs
    return locs


# --- destinations -------------------------------------------------------------------------------


def test_create_destination_and_look_it_up(make_pager: MakePager) -> None:
    pager = make_pager()
    a = pager.create_destination("orders")
    b = pager.create_destination("invoices", order="lifo")
    assert type(a) is int and type(b) is int and a != b
    assert pager.destination("orders") == a
    assert pager.destination("invoices") == b
    assert pager.count(a) == pager.count(b) == 0
    assert pager.browse(a) == []
    assert pager.next(a, 0) is None and pager.take(a, 0) is None
    assert pager.stats()["destinations"] == 2


def test_default_order_is_fifo(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    keys = [pager.add(dest, b"m%d" % i, id=i, priority=i % 10) for i in range(12)]
    assert len(set(keys)) == 12 and all(type(k) is int for k in keys)
    assert pager.browse(dest) == keys


def test_header_fields_and_defaults(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    k = pager.add(dest, b"abc", id=7)
    h = pager.header(k)
    assert set(h) >= HEADER_KEYS, HEADER_KEYS - set(h)
    assert h["destination"] in (dest, "q")
    assert {f: h[f] for f in HEADER_KEYS - {"destination"}} == {
        "id": 7,
        "priority": 4,
        "timestamp": 0,
        "expiration": 0,
        "delivery_time": 0,
        "redelivery_count": 0,
        "correlation_id": None,
        "type": None,
        "unit_of_order": None,
        "body_size": 3,
        "location": "memory",
        "reserved": False,
    }
    k2 = pager.add(
        dest,
        b"",
        id=8,
        priority=9,
        timestamp=1_700_000_000_000,
        expiration=1_700_000_060_000,
        delivery_time=1_700_000_001_000,
        redelivery_count=2,
        correlation_id="corr-1",
        type="invoice",
        unit_of_order="uoo-a",
    )
    h2 = pager.header(k2)
    assert {f: h2[f] for f in HEADER_KEYS - {"destination", "location"}} == {
        "id": 8,
        "priority": 9,
        "timestamp": 1_700_000_000_000,
        "expiration": 1_700_000_060_000,
        "delivery_time": 1_700_000_001_000,
        "redelivery_count": 2,
        "correlation_id": "corr-1",
        "type": "invoice",
        "unit_of_order": "uoo-a",
        "body_size": 0,
        "reserved": False,
    }
    assert pager.body(k2) == b""


# --- order ----------------------------------------------------------------------------------------

# id, priority, timestamp, expiration, delivery_time, redelivery_count
ROWS = [
    (30, 4, 200, 400, 0, 1),
    (10, 9, 100, 500, 50, 0),
    (50, 4, 100, 300, 0, 2),
    (20, 0, 300, 300, 20, 1),
    (40, 9, 200, 100, 50, 1),
]
# indexes into ROWS in delivery order; equal keys keep arrival (FIFO) order, both ways
EXPECTED_ORDER = {
    "fifo": [0, 1, 2, 3, 4],
    "lifo": [4, 3, 2, 1, 0],
    "priority": [1, 4, 0, 2, 3],
    "-priority": [1, 4, 0, 2, 3],
    "+priority": [3, 0, 2, 1, 4],
    "timestamp": [1, 2, 0, 4, 3],
    "+timestamp": [1, 2, 0, 4, 3],
    "-timestamp": [3, 0, 4, 1, 2],
    "expiration": [4, 2, 3, 0, 1],
    "-expiration": [1, 0, 2, 3, 4],
    "delivery_time": [0, 2, 3, 1, 4],
    "-delivery_time": [1, 4, 3, 0, 2],
    "redelivery_count": [1, 0, 3, 4, 2],
    "-redelivery_count": [2, 0, 3, 4, 1],
    "id": [1, 3, 0, 4, 2],
    "-id": [2, 4, 0, 3, 1],
}
DRAIN_NOW = 60  # every row is due (delivery_time <= 60) and none expired (expiration > 60)


def add_rows(pager: Pager, dest: int) -> list[int]:
    return [
        pager.add(
            dest,
            b"row-%d" % i,
            id=mid,
            priority=pri,
            timestamp=ts,
            expiration=exp,
            delivery_time=dt,
            redelivery_count=rc,
        )
        for i, (mid, pri, ts, exp, dt, rc) in enumerate(ROWS)
    ]


@pytest.mark.parametrize("order", sorted(EXPECTED_ORDER))
def test_order(make_pager: MakePager, order: str) -> None:
    pager = make_pager()
    dest = pager.create_destination("q", order=order)
    keys = add_rows(pager, dest)
    expected = [keys[i] for i in EXPECTED_ORDER[order]]
    assert pager.browse(dest) == expected
    assert pager.next(dest, DRAIN_NOW, reserve=False) == expected[0]
    # take returns them in that order (each take reserves, so the next take moves on)
    taken = []
    while (got := pager.take(dest, DRAIN_NOW)) is not None:
        taken.append(got)
    assert taken == [(k, b"row-%d" % keys.index(k)) for k in expected]
    assert pager.next(dest, DRAIN_NOW) is None
    assert pager.count(dest) == 5
    assert pager.browse(dest) == expected  # reserved messages are browsed too
    for k in keys:
        pager.release(k, redelivered=False)
    assert pager.browse(dest) == expected
    assert [pager.header(k)["redelivery_count"] for k in keys] == [r[5] for r in ROWS]


def test_two_destinations_keep_their_own_order(make_pager: MakePager) -> None:
    pager = make_pager()
    fifo = pager.create_destination("fifo")
    prio = pager.create_destination("prio", order="priority")
    f_keys = add_rows(pager, fifo)
    p_keys = add_rows(pager, prio)
    assert pager.browse(fifo) == f_keys
    assert pager.browse(prio) == [p_keys[i] for i in EXPECTED_ORDER["priority"]]
    assert pager.count(fifo) == pager.count(prio) == 5
    assert pager.stats()["messages"] == 10
    assert all(pager.header(k)["destination"] in (fifo, "fifo") for k in f_keys)
    assert all(pager.header(k)["destination"] in (prio, "prio") for k in p_keys)


def test_release_keeps_the_place_in_fifo(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    keys = [pager.add(dest, b"%d" % i, id=i) for i in range(4)]
    assert pager.take(dest, 0) == (keys[0], b"0")
    assert pager.take(dest, 0) == (keys[1], b"1")
    pager.release(keys[0])
    assert pager.browse(dest) == keys
    assert pager.next(dest, 0, reserve=False) == keys[0]
    assert pager.take(dest, 0) == (keys[0], b"0")
    assert pager.take(dest, 0) == (keys[2], b"2")


def test_release_re_sorts_a_destination_sorted_on_redelivery_count(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q", order="redelivery_count")
    keys = add_rows(pager, dest)
    assert pager.take(dest, DRAIN_NOW) == (keys[1], b"row-1")  # the only count 0
    pager.release(keys[1])  # its count becomes 1: after row 0 (also 1, arrived earlier)
    assert pager.header(keys[1])["redelivery_count"] == 1
    assert pager.browse(dest) == [keys[i] for i in (0, 1, 3, 4, 2)]


@pytest.mark.parametrize("order", ["expiration", "+expiration", "-expiration"])
def test_never_expiring_sorts_as_the_latest_expiration(make_pager: MakePager, order: str) -> None:
    pager = make_pager()
    dest = pager.create_destination("q", order=order)
    never = pager.add(dest, b"never", id=1, expiration=0)
    late = pager.add(dest, b"late", id=2, expiration=9_000)
    early = pager.add(dest, b"early", id=3, expiration=10)
    never2 = pager.add(dest, b"never2", id=4, expiration=0)
    ascending = [early, late, never, never2]
    expected = ascending if not order.startswith("-") else [never, never2, late, early]
    assert pager.browse(dest) == expected


# --- next / take ----------------------------------------------------------------------------------


def test_next_skips_not_due_expired_reserved_and_filtered(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    later = pager.add(dest, b"due-later", id=1, delivery_time=100)
    expired = pager.add(dest, b"expired", id=2, expiration=50)  # expiration == now: expired
    first = pager.add(dest, b"first", id=3)
    low = pager.add(dest, b"low", id=4, priority=1)
    high = pager.add(dest, b"high", id=5, priority=7, expiration=51)  # expiration > now: deliverable
    due = pager.add(dest, b"due-now", id=6, delivery_time=50)  # delivery_time == now: due
    seen: list[dict[str, Any]] = []

    def high_only(h: dict[str, Any]) -> bool:
        seen.append(h)
        return bool(h["priority"] >= 5)

    now = 50
    assert pager.next(dest, now) == first  # reserves it
    assert pager.header(first)["reserved"] is True
    assert pager.next(dest, now, reserve=False) == low
    assert pager.next(dest, now, reserve=False, filter=high_only) == high
    assert pager.header(high)["reserved"] is False and pager.header(low)["reserved"] is False
    assert seen and all(HEADER_KEYS - {"location", "reserved"} <= set(h) for h in seen)
    assert pager.take(dest, now, filter=high_only) == (high, b"high")
    assert pager.take(dest, now, filter=high_only) is None  # due-now has priority 4
    pager.release(high, redelivered=False)
    assert pager.next(dest, 51, reserve=False, filter=high_only) is None  # now expired
    assert pager.take(dest, 51) == (low, b"low")
    assert pager.take(dest, 51) == (due, b"due-now")
    assert pager.next(dest, 99) is None  # due-later is not due, expired is expired, the rest reserved
    assert pager.next(dest, 100, reserve=False) == later
    assert pager.count(dest) == 6
    assert pager.browse(dest) == [later, expired, first, low, high, due]


def test_release_and_redelivery_count(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    k = pager.add(dest, b"m", id=1, redelivery_count=3)
    assert pager.take(dest, 0) == (k, b"m")
    assert pager.header(k)["reserved"] is True
    assert pager.next(dest, 0) is None
    pager.release(k)  # redelivered=True by default
    h = pager.header(k)
    assert h["reserved"] is False and h["redelivery_count"] == 4
    assert pager.take(dest, 0) == (k, b"m")
    pager.release(k, redelivered=False)
    assert pager.header(k)["redelivery_count"] == 4
    assert pager.next(dest, 0, reserve=False) == k


def test_remove(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    keys = [pager.add(dest, b"%d" % i, id=i) for i in range(5)]
    pager.remove(keys[2])  # not reserved
    assert pager.take(dest, 0) == (keys[0], b"0")
    pager.remove(keys[0])  # reserved
    assert pager.browse(dest) == [keys[1], keys[3], keys[4]]
    assert pager.count(dest) == 3 and pager.stats()["messages"] == 3
    for k in (keys[0], keys[2]):
        with pytest.raises(UnknownHandleError):
            pager.header(k)
        with pytest.raises(UnknownHandleError):
            pager.remove(k)


# --- bodies: resident, paged, store-paged ---------------------------------------------------------


def test_take_resident_bodies(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=HUGE_BUDGET)
    dest = pager.create_destination("q")
    sent = [(pager.add(dest, body_of(i), id=i), body_of(i)) for i in range(20)]
    assert locations(pager, [k for k, _ in sent]) == ["memory"] * 20
    s = check_stats(pager, [k for k, _ in sent], HUGE_BUDGET)
    assert s["resident_bytes"] == 20_000 and s["page_outs"] == 0 and s["paging_file_bytes"] == 0
    assert drain(pager, dest) == sent
    s = pager.stats()
    assert s["messages"] == 0 and s["resident_bytes"] == 0 and s["page_ins"] == 0


def test_take_paged_bodies(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q")
    sent = []
    for i in range(20):
        sent.append((pager.add(dest, body_of(i), id=i), body_of(i)))
        check_stats(pager, [k for k, _ in sent], SMALL_BUDGET)
    keys = [k for k, _ in sent]
    locs = assert_prefix_resident(pager, dest)
    assert "paged" in locs and "store" not in locs
    s = check_stats(pager, keys, SMALL_BUDGET)
    assert s["page_outs"] > 0 and s["paged_messages"] > 0 and s["paging_file_bytes"] > 0
    # body() pages in without changing anything else
    last_key, last_body = sent[-1]
    assert pager.header(last_key)["location"] == "paged"
    assert pager.body(last_key) == last_body
    assert pager.stats()["page_ins"] > s["page_ins"]
    check_stats(pager, keys, SMALL_BUDGET)
    assert pager.browse(dest) == keys
    before = pager.stats()
    assert drain(pager, dest) == sent
    after = pager.stats()
    assert after["page_ins"] > before["page_ins"]
    assert after["messages"] == 0 and after["resident_bytes"] == 0 and after["paged_messages"] == 0


def test_take_store_paged_bodies(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q")
    sent = []
    for i in range(20):
        body = body_of(i)
        h = store.put("q", body)
        sent.append((pager.add(dest, body, id=i, store_handle=h), body))
        s = check_stats(pager, [k for k, _ in sent], SMALL_BUDGET)
        assert s["paging_file_bytes"] == 0  # persistent bodies are never copied to a paging file
    keys = [k for k, _ in sent]
    locs = locations(pager, keys)
    assert "store" in locs and "paged" not in locs
    assert locs[0] == "memory"
    s = check_stats(pager, keys, SMALL_BUDGET)
    assert s["store_paged_messages"] == locs.count("store") > 0 and s["page_outs"] > 0
    assert drain(pager, dest) == sent
    s = pager.stats()
    assert s["paging_file_bytes"] == 0 and s["page_ins"] > 0 and s["messages"] == 0


def test_add_stored_reads_the_body_from_the_store(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store)
    dest = pager.create_destination("q")
    bodies = [body_of(i, 300 + i) for i in range(5)]
    handles = [store.put("q", b) for b in bodies]
    keys = [
        pager.add_stored(dest, h, len(b), id=i, priority=i, correlation_id=f"c{i}")
        for i, (h, b) in enumerate(zip(handles, bodies, strict=True))
    ]
    for i, k in enumerate(keys):
        h = pager.header(k)
        assert h["body_size"] == len(bodies[i]) and h["id"] == i and h["priority"] == i
        assert h["correlation_id"] == f"c{i}"
        assert h["location"] == "store"
    assert pager.stats()["store_paged_messages"] == 5
    assert pager.body(keys[3]) == bodies[3]
    check_stats(pager, keys, 64 << 20)
    assert drain(pager, dest) == list(zip(keys, bodies, strict=True))  # FIFO: priority does not reorder
    assert pager.stats()["paging_file_bytes"] == 0


def test_a_store_handle_the_store_does_not_hold_is_refused_and_changes_nothing(
    make_pager: MakePager, store: FileStore
) -> None:
    """A message whose body is read back from the store names a record the
    store holds: another handle would fail every take behind it."""
    pager = make_pager(store, message_buffer_size=0)
    dest = pager.create_destination("q")
    good = store.put("q", b"good")
    gone = store.put("q", b"gone")
    store.delete(gone)
    for handle in (999, gone):
        with pytest.raises(UnknownHandleError):
            pager.add_stored(dest, handle, 4, id=1)
        with pytest.raises(UnknownHandleError):
            pager.add(dest, b"body", id=1, store_handle=handle)
    assert pager.count(dest) == 0
    key = pager.add_stored(dest, good, 4, id=2)
    assert drain(pager, dest) == [(key, b"good")]


def test_budget_zero_keeps_no_body_resident(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=0)
    dest = pager.create_destination("q")
    sent = []
    for i in range(6):
        body = body_of(i, 100)
        h = store.put("q", body) if i % 2 else None
        sent.append((pager.add(dest, body, id=i, store_handle=h), body))
    keys = [k for k, _ in sent]
    assert locations(pager, keys) == ["paged", "store"] * 3
    s = check_stats(pager, keys, 0)
    assert s["resident_bytes"] == 0 and s["resident_messages"] == 0
    assert s["store_paged_messages"] == 3 and s["paged_messages"] == 3
    assert [pager.body(k) for k in keys] == [b for _, b in sent]
    assert pager.stats()["resident_bytes"] == 0
    assert drain(pager, dest) == sent


def test_a_body_larger_than_the_budget_is_never_resident(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=1000)
    dest = pager.create_destination("q")
    big = pager.add(dest, body_of(1, 5000), id=1)
    assert pager.header(big)["location"] == "paged"
    assert pager.body(big) == body_of(1, 5000)
    assert pager.header(big)["location"] == "paged"
    small = pager.add(dest, body_of(2, 500), id=2)
    assert pager.header(small)["location"] == "memory"  # it fits
    check_stats(pager, [big, small], 1000)
    assert pager.take(dest, 0) == (big, body_of(1, 5000))
    check_stats(pager, [big, small], 1000)
    assert pager.header(big)["location"] == "paged"


def test_everything_stays_resident_within_the_budget(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=10_000)
    dest = pager.create_destination("q")
    keys = [pager.add(dest, body_of(i), id=i) for i in range(10)]  # exactly 10,000 bytes
    assert locations(pager, keys) == ["memory"] * 10
    s = check_stats(pager, keys, 10_000)
    assert s["resident_bytes"] == 10_000 and s["page_outs"] == 0 and s["paging_file_bytes"] == 0
    k = pager.add(dest, b"x", id=10)  # one byte over: the furthest from delivery (the newest) goes
    assert pager.header(k)["location"] == "paged"
    assert pager.stats()["page_outs"] >= 1
    assert pager.header(keys[0])["location"] == "memory"


@pytest.mark.parametrize("order", ["fifo", "lifo"])
def test_furthest_from_delivery_is_paged_first(make_pager: MakePager, order: str) -> None:
    pager = make_pager(message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q", order=order)
    keys = [pager.add(dest, body_of(i), id=i) for i in range(10)]
    locs = assert_prefix_resident(pager, dest)
    assert "paged" in locs
    by_key = dict(zip(browse_all(pager, dest), locs, strict=True))
    # FIFO: the oldest are delivered first and stay; LIFO: the newest
    nearest = keys[0] if order == "fifo" else keys[-1]
    furthest = keys[-1] if order == "fifo" else keys[0]
    assert by_key[nearest] == "memory" and by_key[furthest] == "paged"


def test_high_priority_arrivals_push_low_priority_bodies_out(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q", order="priority")
    low = [pager.add(dest, body_of(i), id=i, priority=0) for i in range(6)]
    high = [pager.add(dest, body_of(10 + i), id=10 + i, priority=9) for i in range(3)]
    assert pager.browse(dest) == high + low
    assert_prefix_resident(pager, dest)
    assert locations(pager, high) == ["memory"] * 3
    check_stats(pager, low + high, SMALL_BUDGET)


@pytest.mark.parametrize("read_ahead", [0, 16])
def test_read_ahead(make_pager: MakePager, read_ahead: int) -> None:
    budget = 16_384
    pager = make_pager(message_buffer_size=budget, read_ahead=read_ahead)
    dest = pager.create_destination("q")
    sent = [(pager.add(dest, body_of(i), id=i), body_of(i)) for i in range(200)]
    before = check_stats(pager, [k for k, _ in sent], budget)
    assert before["paged_messages"] > 150
    got = []
    while (item := pager.take(dest, 0)) is not None:
        got.append(item)
        pager.remove(item[0])
        assert pager.stats()["resident_bytes"] <= budget
    assert got == sent
    after = pager.stats()
    assert after["page_ins"] > before["page_ins"]
    if read_ahead:
        assert after["read_ahead_hits"] > 0
    else:
        assert after["read_ahead_hits"] == 0


def test_mixed_persistent_and_non_persistent_under_pressure(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=SMALL_BUDGET)
    a = pager.create_destination("a")
    b = pager.create_destination("b", order="-priority")
    sent: dict[int, bytes] = {}
    for i in range(40):
        body = body_of(i, 200 + 37 * i)
        h = store.put("q", body) if i % 3 == 0 else None
        sent[pager.add(a if i % 2 else b, body, id=i, priority=i % 10, store_handle=h)] = body
        check_stats(pager, list(sent), SMALL_BUDGET)
    for k, body in sent.items():
        loc = pager.header(k)["location"]
        persistent = pager.header(k)["id"] % 3 == 0
        assert loc in (("memory", "store") if persistent else ("memory", "paged"))
        assert pager.body(k) == body
    check_stats(pager, list(sent), SMALL_BUDGET)
    drained = drain(pager, a) + drain(pager, b)
    assert dict(drained) == sent and len(drained) == len(sent)


# --- expired --------------------------------------------------------------------------------------


def test_expired_lists_earliest_first_and_removes_nothing(make_pager: MakePager) -> None:
    pager = make_pager()
    d1 = pager.create_destination("d1")
    d2 = pager.create_destination("d2", order="lifo")
    k1 = pager.add(d1, b"1", id=1, expiration=300)
    k2 = pager.add(d2, b"2", id=2, expiration=100)
    k3 = pager.add(d1, b"3", id=3, expiration=0)  # never expires
    k4 = pager.add(d1, b"4", id=4, expiration=200)
    k5 = pager.add(d2, b"5", id=5, expiration=250)
    pager.add(d2, b"6", id=6, expiration=1000)
    browse_before = (pager.browse(d1), pager.browse(d2))
    assert pager.expired(99) == []
    assert pager.expired(100) == [k2]
    assert pager.expired(250) == [k2, k4, k5]
    assert pager.expired(300, limit=2) == [k2, k4]
    assert pager.expired(300, limit=1) == [k2]
    assert pager.expired(300) == [k2, k4, k5, k1]
    assert (pager.browse(d1), pager.browse(d2)) == browse_before
    assert pager.count(d1) == pager.count(d2) == 3
    pager.remove(k2)
    assert pager.expired(300) == [k4, k5, k1]
    assert pager.next(d1, 300, reserve=False) == k3  # k1 expired at 300, k3 never expires


# --- browse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 3, 10, 24, 25, 1000])
def test_browse_pagination(make_pager: MakePager, limit: int) -> None:
    pager = make_pager()
    dest = pager.create_destination("q", order="priority")
    keys = [
        pager.add(dest, b"%d" % i, id=i, priority=i % 4, delivery_time=10**9 if i == 7 else 0, expiration=1 + i % 3)
        for i in range(25)
    ]
    assert pager.take(dest, 1) is not None  # reserved, not-yet-due (i == 7) and expired ones are browsed too
    full = pager.browse(dest)
    assert sorted(full) == sorted(keys) and len(full) == 25
    assert full == sorted(keys, key=lambda k: (-(keys.index(k) % 4), keys.index(k)))
    pages: list[int] = []
    after: int | None = None
    while True:
        chunk = pager.browse(dest, after=after, limit=limit)
        assert len(chunk) <= limit
        pages += chunk
        if len(chunk) < limit:
            break
        after = chunk[-1]
    assert pages == full
    assert pager.browse(dest, after=full[-1]) == []
    assert pager.browse(dest, after=full[9], limit=5) == full[10:15]


# --- the paging directory and codecs --------------------------------------------------------------


def test_paging_directory_is_emptied_at_start(make_pager: MakePager, paging_dir: Path) -> None:
    first = make_pager(message_buffer_size=0)
    first.close()
    # A directory jmsstore made (it carries a marker) is scratch: emptied at start.
    (paging_dir / "stray.page").write_bytes(b"left over from a crash")
    (paging_dir / "00000001.pg").write_bytes(b"\0" * 4096)
    make_pager(message_buffer_size=0)
    names = {p.name for p in paging_dir.iterdir()}
    assert "stray.page" not in names and "00000001.pg" not in names


def test_a_foreign_non_empty_directory_is_refused_not_emptied(tmp_path: Path) -> None:
    foreign = tmp_path / "somebody-elses"
    foreign.mkdir()
    (foreign / "precious.txt").write_bytes(b"keep me")
    with pytest.raises(InvalidArgumentError, match="not empty"):
        Pager(None, message_buffer_size=0, paging_directory=foreign)
    assert (foreign / "precious.txt").read_bytes() == b"keep me"


def test_paging_directory_is_created(make_pager: MakePager, tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "paging"
    pager = make_pager(message_buffer_size=0, paging_directory=path)  # a Path works as well as a str
    dest = pager.create_destination("q")
    k = pager.add(dest, body_of(1), id=1)
    assert path.is_dir()
    assert pager.take(dest, 0) == (k, body_of(1))


def test_store_none_needs_no_store(make_pager: MakePager) -> None:
    with make_pager(None, message_buffer_size=2000) as pager:
        dest = pager.create_destination("q")
        sent = [(pager.add(dest, compressible(i), id=i), compressible(i)) for i in range(5)]
        assert drain(pager, dest) == sent


@pytest.mark.parametrize("codec", _native.codecs())
def test_paging_codec_round_trips(make_pager: MakePager, codec: str) -> None:
    pager = make_pager(message_buffer_size=SMALL_BUDGET, paging_codec=codec)
    dest = pager.create_destination("q")
    bodies = [compressible(i) if i % 3 else body_of(i, 1500) for i in range(30)] + [b"", b"x"]
    sent = [(pager.add(dest, b, id=i), b) for i, b in enumerate(bodies)]
    keys = [k for k, _ in sent]
    s = check_stats(pager, keys, SMALL_BUDGET)
    assert s["paged_messages"] > 0 and s["paging_file_bytes"] > 0
    for k, b in reversed(sent):  # the paged ones first
        assert pager.body(k) == b
        assert pager.header(k)["body_size"] == len(b)
    check_stats(pager, keys, SMALL_BUDGET)
    assert drain(pager, dest) == sent


# --- bad input: a clear, typed error, and nothing changes ------------------------------------------


class Populated:
    """A pager with two destinations, persistent and non-persistent messages, some paged, one reserved."""

    def __init__(self, pager: Pager, store: FileStore) -> None:
        self.pager = pager
        self.fifo = pager.create_destination("fifo")
        self.prio = pager.create_destination("prio", order="priority")
        self.dests = [self.fifo, self.prio]
        self.keys: list[int] = []
        for i in range(16):
            body = body_of(i, 700)
            h = store.put("q", body) if i % 4 == 0 else None
            dest = self.fifo if i % 2 else self.prio
            self.keys.append(pager.add(dest, body, id=i, priority=i % 10, expiration=1000 + i, store_handle=h))
        self.reserved = pager.take(self.fifo, 0)
        assert self.reserved is not None
        self.unknown_key = max(self.keys) + 1_000_003
        self.unknown_dest = max(self.dests) + 1000

    def snapshot(self) -> dict[str, Any]:
        p = self.pager
        return {
            "stats": p.stats(),
            "browse": {d: browse_all(p, d) for d in self.dests},
            "counts": {d: p.count(d) for d in self.dests},
            "headers": {k: p.header(k) for k in self.keys},
            "expired": p.expired(10**6),
        }


@pytest.fixture
def populated(make_pager: MakePager, store: FileStore) -> Populated:
    return Populated(make_pager(store, message_buffer_size=SMALL_BUDGET), store)


BadCall = Callable[[Populated], object]

BAD_CALLS: dict[str, tuple[BadCall, type[Exception]]] = {
    "add: unknown destination": (lambda s: s.pager.add(s.unknown_dest, b"x", id=99), InvalidArgumentError),
    "add_stored: unknown destination": (
        lambda s: s.pager.add_stored(s.unknown_dest, 1, 1, id=99),
        InvalidArgumentError,
    ),
    "add: priority 10": (lambda s: s.pager.add(s.fifo, b"x", id=99, priority=10), InvalidArgumentError),
    "add: priority -1": (lambda s: s.pager.add(s.fifo, b"x", id=99, priority=-1), InvalidArgumentError),
    "add_stored: priority 10": (
        lambda s: s.pager.add_stored(s.fifo, 1, 1, id=99, priority=10),
        InvalidArgumentError,
    ),
    "create_destination: duplicate name": (lambda s: s.pager.create_destination("fifo"), InvalidArgumentError),
    "create_destination: duplicate name, other order": (
        lambda s: s.pager.create_destination("prio", order="lifo"),
        InvalidArgumentError,
    ),
    "destination: unknown name": (lambda s: s.pager.destination("nope"), InvalidArgumentError),
    "next: unknown destination": (lambda s: s.pager.next(s.unknown_dest, 0), InvalidArgumentError),
    "take: unknown destination": (lambda s: s.pager.take(s.unknown_dest, 0), InvalidArgumentError),
    "browse: unknown destination": (lambda s: s.pager.browse(s.unknown_dest), InvalidArgumentError),
    "count: unknown destination": (lambda s: s.pager.count(s.unknown_dest), InvalidArgumentError),
    "header: unknown key": (lambda s: s.pager.header(s.unknown_key), UnknownHandleError),
    "body: unknown key": (lambda s: s.pager.body(s.unknown_key), UnknownHandleError),
    "release: unknown key": (lambda s: s.pager.release(s.unknown_key), UnknownHandleError),
    "remove: unknown key": (lambda s: s.pager.remove(s.unknown_key), UnknownHandleError),
    "take_many: unknown destination": (lambda s: s.pager.take_many(s.unknown_dest, 0, 5), InvalidArgumentError),
    "take_many: negative limit": (lambda s: s.pager.take_many(s.fifo, 0, -1), InvalidArgumentError),
    "take_many: str limit": (lambda s: s.pager.take_many(s.fifo, 0, "5"), TypeError),
    "take_many: int filter_body": (lambda s: s.pager.take_many(s.fifo, 0, 5, filter_body=1), TypeError),
    "take: int filter_body": (lambda s: s.pager.take(s.fifo, 0, filter_body=1), TypeError),
    "next: int filter_body": (lambda s: s.pager.next(s.fifo, 0, filter_body=1), TypeError),
    "delete_destination: unknown destination": (
        lambda s: s.pager.delete_destination(s.unknown_dest),
        InvalidArgumentError,
    ),
    "delete_destination: str destination": (lambda s: s.pager.delete_destination("fifo"), TypeError),
    "release: unknown key, with a delivery time": (
        lambda s: s.pager.release(s.unknown_key, delivery_time=5),
        UnknownHandleError,
    ),
    "release: str delivery_time": (lambda s: s.pager.release(s.keys[0], delivery_time="soon"), TypeError),
    "release: delivery_time past i64": (
        lambda s: s.pager.release(s.keys[0], delivery_time=1 << 63),
        InvalidArgumentError,
    ),
    "add: str body": (lambda s: s.pager.add(s.fifo, "text", id=99), TypeError),
    "add: str destination": (lambda s: s.pager.add("fifo", b"x", id=99), TypeError),
    "add: str id": (lambda s: s.pager.add(s.fifo, b"x", id="ID:99"), TypeError),
    "add: str priority": (lambda s: s.pager.add(s.fifo, b"x", id=99, priority="high"), TypeError),
    "add: int correlation_id": (lambda s: s.pager.add(s.fifo, b"x", id=99, correlation_id=5), TypeError),
    "add: no id": (lambda s: s.pager.add(s.fifo, b"x"), TypeError),
    "add_stored: str handle": (lambda s: s.pager.add_stored(s.fifo, "h", 1, id=99), TypeError),
    "next: str now": (lambda s: s.pager.next(s.fifo, "now"), TypeError),
    "take: str now": (lambda s: s.pager.take(s.fifo, "now"), TypeError),
    "expired: str now": (lambda s: s.pager.expired("now"), TypeError),
    "header: str key": (lambda s: s.pager.header("key"), TypeError),
    "remove: str key": (lambda s: s.pager.remove("key"), TypeError),
    "create_destination: int name": (lambda s: s.pager.create_destination(5), TypeError),
    "create_destination: int order": (lambda s: s.pager.create_destination("new", order=5), TypeError),
}
BAD_ORDERS = ["sideways", "", "-", "+", "--timestamp", "+-timestamp", "-fifo", "+lifo", "timestamp ", "body_size"]


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_call_raises_and_changes_nothing(populated: Populated, case: str) -> None:
    call, exc = BAD_CALLS[case]
    before = populated.snapshot()
    with pytest.raises(exc) as info:
        call(populated)
    if issubclass(exc, JmsStoreError):
        assert str(info.value)  # says what is wrong
    assert populated.snapshot() == before


@pytest.mark.parametrize("order", BAD_ORDERS)
def test_bad_order_raises_and_changes_nothing(populated: Populated, order: str) -> None:
    before = populated.snapshot()
    with pytest.raises(InvalidArgumentError):
        populated.pager.create_destination("new", order=order)
    assert populated.snapshot() == before
    with pytest.raises(InvalidArgumentError):
        populated.pager.destination("new")


def test_unknown_destination_name_is_named(populated: Populated) -> None:
    with pytest.raises(InvalidArgumentError, match="no-such-queue"):
        populated.pager.destination("no-such-queue")


def test_exception_classes() -> None:
    assert issubclass(UnknownHandleError, InvalidArgumentError)
    assert issubclass(InvalidArgumentError, JmsStoreError)


def _assert_rejected(make_pager: MakePager, store: FileStore | None, path: Path, **options: Any) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        make_pager(store, paging_directory=str(path), **options)
    assert str(path) in str(info.value)


def test_negative_budget(make_pager: MakePager, paging_dir: Path) -> None:
    paging_dir.mkdir()
    (paging_dir / "stray").write_bytes(b"s")
    with pytest.raises(InvalidArgumentError, match="-1"):
        make_pager(message_buffer_size=-1)
    assert (paging_dir / "stray").read_bytes() == b"s"  # a failed start empties nothing


def test_unknown_codec(make_pager: MakePager, paging_dir: Path) -> None:
    paging_dir.mkdir()
    (paging_dir / "stray").write_bytes(b"s")
    with pytest.raises(InvalidArgumentError, match="brotli"):
        make_pager(paging_codec="brotli")
    assert (paging_dir / "stray").read_bytes() == b"s"


@pytest.mark.parametrize(
    "options",
    [{"message_buffer_size": "64M"}, {"message_buffer_size": 1.5}, {"paging_codec": 1}, {"read_ahead": "16"}],
    ids=["budget str", "budget float", "codec int", "read_ahead str"],
)
def test_wrong_option_types(make_pager: MakePager, options: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        make_pager(**options)


def test_store_of_wrong_type(make_pager: MakePager, tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        make_pager(str(tmp_path / "store"))


def _store_files(store: FileStore) -> dict[str, bytes]:
    # A `.prep` file is the spare segment the store's preparer thread is still filling
    # with zeros in the background: it grows on its own, whatever the pager does.
    return {p.name: p.read_bytes() for p in Path(store.path).iterdir() if p.is_file() and p.suffix != ".prep"}


@pytest.mark.parametrize("where", ["inside", "nested", "same"])
def test_paging_directory_inside_the_store_directory(make_pager: MakePager, store: FileStore, where: str) -> None:
    h = store.put("q", b"kept")
    files = _store_files(store)
    root = Path(store.path)
    path = {"inside": root / "paging", "nested": root / "a" / "b", "same": root}[where]
    _assert_rejected(make_pager, store, path)
    assert _store_files(store) == files
    assert not (root / "paging").exists() and not (root / "a").exists()
    assert store.read(h) == b"kept"
    store.put("q", b"still writable")


def test_paging_directory_is_a_file(make_pager: MakePager, tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"not a directory")
    _assert_rejected(make_pager, None, path)
    assert path.read_bytes() == b"not a directory"
    under = path / "paging"
    with pytest.raises(InvalidArgumentError):
        make_pager(paging_directory=str(under))


def test_paging_directory_not_writable(make_pager: MakePager, tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Permissions do not stop root: use a place no one can create a directory in.
        _assert_rejected(make_pager, None, Path("/proc/jmsstore-test/paging"))
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
    try:
        _assert_rejected(make_pager, None, ro)
        _assert_rejected(make_pager, None, ro / "paging")
    finally:
        ro.chmod(0o700)


def test_remove_twice(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    k = pager.add(dest, b"x", id=1)
    other = pager.add(dest, b"y", id=2)
    pager.remove(k)
    before = (pager.stats(), pager.browse(dest))
    with pytest.raises(UnknownHandleError):
        pager.remove(k)
    with pytest.raises(UnknownHandleError):
        pager.body(k)
    assert (pager.stats(), pager.browse(dest)) == before == (pager.stats(), [other])


# --- filters that see bodies ------------------------------------------------------------------------


def test_filter_body_sees_every_body_without_paging_it_in(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q")
    sent: dict[int, bytes] = {}
    for i in range(12):
        body = body_of(i)
        handle = store.put("q", body) if i % 2 else None
        sent[pager.add(dest, body, id=i, store_handle=handle)] = body
    keys = list(sent)
    locs = locations(pager, keys)
    assert {"memory", "paged", "store"} <= set(locs)
    before = check_stats(pager, keys, SMALL_BUDGET)
    seen: list[tuple[int, bytes]] = []

    def record(h: dict[str, Any], body: bytes) -> bool:
        assert isinstance(body, bytes) and len(body) == h["body_size"]
        seen.append((h["id"], body))
        return False

    assert pager.next(dest, 0, filter=record, filter_body=True) is None
    assert seen == [(i, sent[k]) for i, k in enumerate(keys)]
    after = check_stats(pager, keys, SMALL_BUDGET)
    assert after["filter_body_reads"] == before["filter_body_reads"] + sum(loc != "memory" for loc in locs)
    assert {**after, "filter_body_reads": 0} == {**before, "filter_body_reads": 0}  # no page-in, nothing moved
    assert locations(pager, keys) == locs

    # select on the body: one paged, one only in the store
    for loc in ("paged", "store"):
        key = keys[locs.index(loc)]
        wanted = sent[key]
        page_ins = pager.stats()["page_ins"]
        assert pager.take(dest, 0, filter=lambda h, b, wanted=wanted: b == wanted, filter_body=True) == (key, wanted)
        assert pager.header(key)["reserved"] is True
        assert pager.stats()["page_ins"] == page_ins + 1  # the delivery itself
    check_stats(pager, keys, SMALL_BUDGET)


def test_filter_without_filter_body_gets_the_header_only(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    k = pager.add(dest, b"x", id=1)
    calls: list[int] = []

    def one_arg(h: dict[str, Any]) -> bool:
        calls.append(h["id"])
        return True

    assert pager.next(dest, 0, reserve=False, filter=one_arg) == k
    assert pager.take_many(dest, 0, 5, filter=one_arg) == [(k, 0, None, b"x")]
    assert calls == [1, 1]
    assert pager.stats()["filter_body_reads"] == 0


def test_a_body_filter_that_raises_reserves_nothing(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    k = pager.add(dest, b"x", id=1)

    def boom(h: dict[str, Any], body: bytes) -> bool:
        raise ValueError(body.decode())

    with pytest.raises(ValueError, match="x"):
        pager.take(dest, 0, filter=boom, filter_body=True)
    with pytest.raises(ValueError, match="x"):
        pager.take_many(dest, 0, 3, filter=boom, filter_body=True)
    assert pager.header(k)["reserved"] is False
    # accepting some first, then raising: those are not left reserved either
    later = pager.add(dest, b"y", id=2)

    def accept_then_raise(h: dict[str, Any], body: bytes) -> bool:
        if body == b"y":
            raise ValueError("y")
        return True

    with pytest.raises(ValueError, match="y"):
        pager.take_many(dest, 0, 3, filter=accept_then_raise, filter_body=True)
    assert pager.header(k)["reserved"] is False and pager.header(later)["reserved"] is False
    assert pager.take_many(dest, 0, 3) == [(k, 0, None, b"x"), (later, 0, None, b"y")]


# --- release with a delivery time ------------------------------------------------------------------


def test_release_with_a_delivery_time_delays_and_keeps_the_place_in_fifo(make_pager: MakePager) -> None:
    pager = make_pager()
    dest = pager.create_destination("q")
    a = pager.add(dest, b"a", id=1)
    b = pager.add(dest, b"b", id=2)
    assert pager.take(dest, 0) == (a, b"a")
    pager.release(a, delivery_time=500)
    h = pager.header(a)
    assert (h["delivery_time"], h["redelivery_count"], h["reserved"]) == (500, 1, False)
    assert pager.browse(dest) == [a, b]
    assert pager.take(dest, 499) == (b, b"b")
    assert pager.next(dest, 499) is None
    assert pager.take(dest, 500) == (a, b"a")
    pager.release(a, redelivered=False, delivery_time=0)
    assert pager.header(a)["redelivery_count"] == 1 and pager.next(dest, 0, reserve=False) == a


@pytest.mark.parametrize("budget", [HUGE_BUDGET, 2500])
def test_release_with_a_delivery_time_re_sorts_by_delivery_time(make_pager: MakePager, budget: int) -> None:
    pager = make_pager(message_buffer_size=budget)
    dest = pager.create_destination("q", order="delivery_time")
    keys = [pager.add(dest, body_of(i), id=i, delivery_time=10 * i) for i in range(5)]
    assert pager.take(dest, 100) == (keys[0], body_of(0))
    pager.release(keys[0], delivery_time=25)
    assert pager.browse(dest) == [keys[i] for i in (1, 2, 0, 3, 4)]
    pager.release(keys[4], redelivered=False, delivery_time=-1)  # not reserved: it moves all the same
    assert pager.browse(dest) == [keys[i] for i in (4, 1, 2, 0, 3)]
    check_stats(pager, keys, budget)
    assert drain(pager, dest, 100) == [(keys[i], body_of(i)) for i in (4, 1, 2, 0, 3)]


# --- delete_destination -----------------------------------------------------------------------------


def test_delete_destination(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=SMALL_BUDGET)
    doomed = pager.create_destination("doomed", order="priority")
    kept = pager.create_destination("kept")
    gone = []
    for i in range(10):
        body = body_of(i)
        gone.append(
            pager.add(
                doomed,
                body,
                id=i,
                priority=i % 10,
                expiration=1000 + i,
                store_handle=store.put("q", body) if i % 3 == 0 else None,
            )
        )
    stay = [(pager.add(kept, body_of(100 + i), id=100 + i), body_of(100 + i)) for i in range(3)]
    assert pager.take(doomed, 0) is not None  # a reserved one goes too
    assert {"memory", "paged", "store"} <= set(locations(pager, gone))
    assert pager.delete_destination(doomed) == 10
    s = check_stats(pager, [k for k, _ in stay], SMALL_BUDGET)
    assert s["destinations"] == 1
    assert pager.expired(10**6) == []
    for k in gone:
        with pytest.raises(UnknownHandleError):
            pager.header(k)
        with pytest.raises(UnknownHandleError):
            pager.release(k)
    for call in (
        lambda: pager.next(doomed, 0),
        lambda: pager.take(doomed, 0),
        lambda: pager.take_many(doomed, 0, 5),
        lambda: pager.browse(doomed),
        lambda: pager.count(doomed),
        lambda: pager.add(doomed, b"x", id=1),
        lambda: pager.delete_destination(doomed),
        lambda: pager.destination("doomed"),
    ):
        with pytest.raises(InvalidArgumentError):
            call()
    again = pager.create_destination("doomed")
    assert again != doomed and pager.destination("doomed") == again and pager.count(again) == 0
    with pytest.raises(InvalidArgumentError):
        pager.count(doomed)
    assert drain(pager, kept) == stay
    assert pager.delete_destination(kept) == 0
    s = pager.stats()
    assert (s["messages"], s["resident_bytes"], s["paged_bytes"], s["paging_file_bytes"]) == (0, 0, 0, 0)


# --- take_many ---------------------------------------------------------------------------------------


def test_take_many(make_pager: MakePager, store: FileStore) -> None:
    pager = make_pager(store, message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q")
    sent = []
    for i in range(12):
        body = body_of(i)
        handle = store.put("q", body) if i % 4 == 0 else None
        sent.append((pager.add(dest, body, id=i, redelivery_count=i % 3, store_handle=handle), i % 3, handle, body))
    later = pager.add(dest, b"later", id=50, delivery_time=100)
    pager.add(dest, b"expired", id=51, expiration=5)
    assert pager.take_many(dest, 10, 0) == []
    assert pager.take_many(dest, 10, 3) == sent[:3]
    assert all(pager.header(k)["reserved"] for k, _, _, _ in sent[:3])
    pager.release(sent[1][0], redelivered=False)
    even = pager.take_many(dest, 10, 100, filter=lambda h, b: b[0] % 2 == 0, filter_body=True)
    expected_even = [m for m in sent if m[3][0] % 2 == 0 and m not in (sent[0], sent[2])]
    assert even == expected_even
    rest = pager.take_many(dest, 10, 100)
    assert rest == [m for m in sent if m not in (sent[0], sent[2]) and m not in expected_even]
    assert pager.take_many(dest, 10, 100) == []
    assert pager.take_many(dest, 100, 100) == [(later, 0, None, b"later")]
    check_stats(pager, browse_all(pager, dest), SMALL_BUDGET)


def test_take_many_drains_a_paged_backlog_in_order(make_pager: MakePager) -> None:
    pager = make_pager(message_buffer_size=SMALL_BUDGET)
    dest = pager.create_destination("q", order="lifo")
    sent = [(pager.add(dest, body_of(i), id=i), body_of(i)) for i in range(40)]
    got: list[tuple[int, bytes]] = []
    while batch := pager.take_many(dest, 0, 3):
        for key, count, _, body in batch:
            assert count == 0
            got.append((key, body))
            pager.remove(key)
        assert pager.stats()["resident_bytes"] <= SMALL_BUDGET
    assert got == sent[::-1]
    s = pager.stats()
    assert s["messages"] == 0 and s["page_ins"] > 0 and s["read_ahead_hits"] > 0


GIL_SCRIPT = """
import sys, tempfile, threading
from jmsstore import Pager

with tempfile.TemporaryDirectory() as d:
    pager = Pager(None, paging_directory=d + "/paging")
    dest = pager.create_destination("q")
    key = pager.add(dest, b"x", id=1)
    inside, go = threading.Event(), threading.Event()

    def hold(h):  # runs with the pager's lock held; waiting lets go of the GIL
        inside.set()
        go.wait()
        return False

    holder = threading.Thread(target=lambda: pager.next(dest, 0, filter=hold))
    holder.start()
    inside.wait()
    got = []
    taker = threading.Thread(target=lambda: got.append(pager.%s))
    taker.start()
    # the taker now waits for the pager's lock; had it kept the GIL, this thread could not run on
    taker.join(0.3)
    go.set()
    holder.join()
    taker.join()
    assert got and got[0] in ([(key, 0, None, b"x")], (key, b"x"), key), got
    print("ok")
"""


@pytest.mark.parametrize("call", ["take_many(dest, 0, 5)", "take(dest, 0)", "next(dest, 0)"])
def test_calls_without_a_filter_release_the_gil(call: str) -> None:
    """A filter-less take_many/take/next waiting for the pager lets other Python threads run
    (run in a subprocess: holding the GIL would deadlock)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", GIL_SCRIPT % call], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
