"""The binding of the broker core (``jmsstore._native``'s ``NativeBroker`` and
its parts): what crosses it converts both ways, a wrong type is a
``TypeError``, a bad value one of the library's typed errors, and every core
error arrives as its own exception class, through the broker's calls too.

Only the public native API is used (``python/jmsstore/_native.pyi``); the
behaviour behind it is the Rust core's, tested there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jmsstore._native import (
    Account,
    AckBacklog,
    CorruptionError,
    Doorbell,
    InvalidArgumentError,
    JmsStoreError,
    NativeBroker,
    NativeDestination,
    NativePager,
    NativeRoutes,
    NativeSelector,
    NativeStagedSend,
    NativeStore,
    NativeTarget,
    Signal,
    StoreClosedError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StorePoisonedError,
    UnknownHandleError,
    decompress,
    write_message,
)
from jmsstore.selector import Selector

NOW = 1_700_000_000_000
DELIVERIES = "jms/test/delivered"
WAIT = 30.0  # seconds; a bound on waits for conditions, never a timing assertion

# (id, priority, timestamp, expiration, delivery_time, correlation_id, type)
Header = tuple[int, int, int, int, int, str | None, str | None]


def message(id_: int, *, persistent: bool = True, text: str = "hello", expiration: int = 0) -> tuple[bytes, Header]:
    """An encoded text message sent at ``NOW``, and its header as the client hands it over."""
    fixed = (1, 1, 2 if persistent else 1, 4, id_, NOW, expiration, NOW)
    data = write_message(fixed, f"ID:test-{id_}", None, None, None, {}, text)
    assert data is not None
    return data, (id_, 4, NOW, expiration, NOW, None, None)


@dataclass
class Engine:
    """One server's engine on a real store and pager in a temporary directory."""

    store: NativeStore
    pager: NativePager
    server: Account
    broker: NativeBroker

    def queue(self, name: str = "Q", quota: Account | None = None) -> tuple[NativeDestination, NativeTarget]:
        """A queue stored in ``q/<name>``, wired as the Python registry wires one."""
        destination = NativeDestination(name, False, quota if quota is not None else Account(), False)
        target = NativeTarget(self.pager.create_destination(name, "fifo"), destination, f"q/{name}")
        destination.add_target(target)
        self.broker.add_destination(destination)
        self.broker.add_target(target)
        return destination, target

    def counted(self, destination: NativeDestination, target: NativeTarget) -> tuple[int, int, int, int]:
        """Messages counted by the target, its pending ones, the destination's gauge and the server."""
        return (target.held.messages, target.pending.messages, destination.gauge.messages, self.server.messages)


def open_engine(path: Path, message_buffer_size: int = 1 << 20) -> Engine:
    store = NativeStore(path / "store", preallocate=False, max_segment_bytes=1 << 20, compaction_threshold=0.0)
    pager = NativePager(store, message_buffer_size=message_buffer_size, paging_directory=path / "paging")
    server = Account()
    return Engine(store, pager, server, NativeBroker(store, pager, DELIVERIES, server))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = open_engine(tmp_path)
    yield e
    e.pager.close()
    e.store.close()


# ------------------------------------------------------------------ conversions


def test_a_send_a_fetch_and_an_acknowledgement_convert_both_ways(engine: Engine) -> None:
    destination, target = engine.queue()
    data, header = message(1)
    assert engine.broker.send(destination, data, header, True) == (0, None)
    assert engine.store.collection_len("q/Q") == 1

    items, record = engine.broker.fetch(target, NOW, 10)
    assert len(items) == 1
    key, redelivery_count, body = items[0]
    assert isinstance(key, int) and (redelivery_count, body) == (0, data)
    assert isinstance(record, Signal)
    assert record.wait(WAIT) and record.error() is None
    assert engine.counted(destination, target) == (1, 1, 1, 1)

    engine.broker.acknowledge([key])
    assert engine.counted(destination, target) == (0, 0, 0, 0)
    assert engine.store.collection_len("q/Q") == 0
    counters = engine.broker.counters()
    assert (counters["sent"], counters["acknowledged"], counters["delivery_records"]) == (1, 1, 1)


def test_a_lazy_acknowledgement_of_one_key_is_the_lazy_acknowledgement_of_a_list_of_it(engine: Engine) -> None:
    destination, target = engine.queue()
    for ident in (1, 2):
        data, header = message(ident)
        engine.broker.send(destination, data, header, True)
    items, record = engine.broker.fetch(target, NOW, 10)
    assert record is not None and record.wait(WAIT)
    (first, _, _), (second, _, _) = items
    backlog = AckBacklog()
    engine.broker.acknowledge_one_lazily(first, backlog, 10)
    engine.broker.acknowledge_lazily([second], backlog, 10)
    assert len(backlog) == 2, "both deletes wait in the backlog"
    assert engine.counted(destination, target) == (0, 0, 0, 0)
    engine.broker.flush_acknowledgements(backlog)
    assert len(backlog) == 0
    deadline = time.monotonic() + WAIT
    while engine.store.collection_len("q/Q") and time.monotonic() < deadline:
        time.sleep(0.01)  # the deletes are written without a wait
    assert engine.store.collection_len("q/Q") == 0
    assert engine.broker.counters()["acknowledged"] == 2


def test_admission_comes_back_as_its_code_with_the_routes_to_wait_with(engine: Engine) -> None:
    quota = Account(1, -1)
    destination, target = engine.queue(quota=quota)
    assert engine.broker.send(destination, *message(1), True) == (0, None)

    # 1: no room in the quota now. The producer waits for room, takes it, comes back admitted.
    data, header = message(2)
    status, routes = engine.broker.send(destination, data, header, True)
    assert status == 1
    assert isinstance(routes, NativeRoutes) and len(routes) == 1 and routes.stored
    assert engine.counted(destination, target) == (1, 0, 1, 1), "nothing counted for it"
    quota.set_maximums(2, -1)
    assert quota.try_add(1, len(data), True)
    engine.broker.admitted_after_wait(destination, routes, len(data), False)
    assert engine.broker.send(destination, data, header, True, routes=routes, admitted=True) == (0, None)
    assert engine.pager.count(target.pager_id) == 2

    # 2: over the broker-wide limits, a persistent message is refused; 3: a non-persistent one dropped.
    engine.broker.set_system_limits(2, -1)
    assert engine.broker.send(destination, *message(3), True)[0] == 2
    assert engine.broker.send(destination, *message(4, persistent=False), False)[0] == 3
    assert engine.broker.counters()["dropped_over_system_limit"] == 1
    assert engine.counted(destination, target) == (2, 0, 2, 2)


def test_expiry_and_recovery_report_as_tuples(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    destination, target = engine.queue()
    destination.set_settings(0, -1, None, "log")
    expiring, header = message(1, expiration=NOW + 100)
    engine.broker.send(destination, expiring, header, True)
    engine.broker.send(destination, *message(2), True)
    assert engine.broker.expire(NOW + 100, 100) == [(target.pager_id, expiring, False)]
    assert (target.expired, destination.messages_expired) == (1, 1)
    engine.pager.close()
    engine.store.close()

    engine = open_engine(tmp_path)
    destination, target = engine.queue()
    assert engine.broker.recover_deliveries() == (0, [], [])
    told: list[int] = []
    loaded, size, malformed, newest = engine.broker.load(target, None, told.append)
    engine.broker.finish_recovery()
    assert (loaded, size, malformed, newest) == (1, len(message(2)[0]), [], 2)
    assert told == [], "told every 10,000 messages"
    assert engine.counted(destination, target) == (1, 0, 1, 1)
    engine.pager.close()
    engine.store.close()


def test_a_subscriptions_selector_and_its_doorbell_are_the_cores(engine: Engine) -> None:
    topic = NativeDestination("T", True, Account(), False)
    engine.broker.add_destination(topic)
    selector = Selector("JMSMessageID = 'ID:test-2'").native()
    subscription = NativeTarget(engine.pager.create_destination("S", "fifo"), topic, "s/S", True, selector)
    topic.add_target(subscription)
    engine.broker.add_target(subscription)
    woken = Signal()
    subscription.bell.push_idle(woken)
    assert subscription.bell.waiting() == (0, 1)

    blue, header = message(1)
    engine.broker.send(topic, blue, header, True)
    assert not woken.is_set(), "a message the selector refuses rings no bell"
    red, header = message(2)
    engine.broker.send(topic, red, header, True)
    assert woken.is_set(), "the send rang the bell the Doorbell wraps"
    items, _ = engine.broker.fetch(subscription, NOW, 10)
    assert [body for _, _, body in items] == [red]
    assert engine.store.collection_len("s/S") == 1


# ------------------------------------------------------------------ wrong types


def _wrong_types(engine: Engine) -> dict[str, Callable[[], object]]:
    destination, target = engine.queue()
    data, header = message(1)
    nonsense: Any = "nonsense"
    number: Any = 42
    return {
        "broker store": lambda: NativeBroker(nonsense, engine.pager, DELIVERIES, Account()),
        "broker deliveries": lambda: NativeBroker(engine.store, engine.pager, number, Account()),
        "destination name": lambda: NativeDestination(number, False, Account(), False),
        "destination quota": lambda: NativeDestination("D", False, nonsense, False),
        "target pager id": lambda: NativeTarget(nonsense, destination),
        "target destination": lambda: NativeTarget(0, nonsense),
        "target collection": lambda: NativeTarget(0, destination, number),
        "account maximum": lambda: Account(nonsense),
        "signal timeout": lambda: Signal().wait(nonsense),
        "doorbell signal": lambda: Doorbell().push_idle(nonsense),
        "backlog arguments": lambda: AckBacklog(nonsense),
        "backlog": lambda: engine.broker.acknowledge_lazily([1], nonsense, 1),
        "one key": lambda: engine.broker.acknowledge_one_lazily(nonsense, AckBacklog(), 1),
        "send data": lambda: engine.broker.send(destination, nonsense, header, True),
        "send header": lambda: engine.broker.send(destination, data, nonsense, True),
        "header field": lambda: engine.broker.send(destination, data, (1, 4, NOW, 0, NOW, number, None), True),
        "fetch limit": lambda: engine.broker.fetch(target, NOW, nonsense),
        "release keys": lambda: engine.broker.release([nonsense], True, NOW),
        "staged send": lambda: engine.broker.commit([nonsense], []),
    }


@pytest.mark.parametrize(
    "case",
    [
        "broker store",
        "broker deliveries",
        "destination name",
        "destination quota",
        "target pager id",
        "target destination",
        "target collection",
        "account maximum",
        "signal timeout",
        "doorbell signal",
        "backlog arguments",
        "backlog",
        "one key",
        "send data",
        "send header",
        "header field",
        "fetch limit",
        "release keys",
        "staged send",
    ],
)
def test_a_wrong_type_is_a_type_error_and_changes_nothing(engine: Engine, case: str) -> None:
    call = _wrong_types(engine)[case]
    with pytest.raises(TypeError):
        call()
    assert engine.server.messages == 0
    assert engine.store.collections() == []


# ------------------------------------------------------------------ bad values


def test_an_unknown_expiration_policy_is_an_invalid_argument() -> None:
    destination = NativeDestination("Q", False, Account(), False)
    for policy in ("discard", "log", "redirect"):
        destination.set_settings(0, -1, None, policy)
    with pytest.raises(InvalidArgumentError, match="expiration policy"):
        destination.set_settings(0, -1, None, "shred")


@pytest.mark.parametrize("fields", [6, 9])
def test_a_header_of_the_wrong_shape_is_an_invalid_argument_and_changes_nothing(engine: Engine, fields: int) -> None:
    """7 fields, or 8 with the unit of order; an empty unit name is refused too."""
    destination, target = engine.queue()
    data, header = message(1)
    wrong: Any = (*header, None, None)[:fields]
    for send in (engine.broker.send, engine.broker.send_async, engine.broker.stage):
        with pytest.raises(InvalidArgumentError, match=r"header|unit of order"):
            send(destination, data, (*header, ""), True)
    for send in (engine.broker.send, engine.broker.send_async, engine.broker.stage):
        with pytest.raises(InvalidArgumentError, match="header"):
            send(destination, data, wrong, True)
    assert engine.counted(destination, target) == (0, 0, 0, 0)
    assert engine.store.collection_len("q/Q") == 0


def test_a_staged_send_ends_once_and_a_refused_call_changes_nothing(engine: Engine) -> None:
    destination, target = engine.queue()
    status, first = engine.broker.stage(destination, *message(1), True)
    assert status == 0 and isinstance(first, NativeStagedSend)
    _, second = engine.broker.stage(destination, *message(2), True)
    assert isinstance(second, NativeStagedSend)
    engine.broker.commit([second], [])

    for sends in ([first, second], [first, first]):
        with pytest.raises(InvalidArgumentError, match="already ended"):
            engine.broker.commit(sends, [])
        with pytest.raises(InvalidArgumentError, match="already ended"):
            engine.broker.unstage(sends)
    assert engine.counted(destination, target) == (2, 1, 2, 2), "the first is staged still"
    assert engine.pager.count(target.pager_id) == 1

    engine.broker.commit([first], [])
    assert engine.counted(destination, target) == (2, 0, 2, 2)
    assert engine.pager.count(target.pager_id) == 2
    with pytest.raises(InvalidArgumentError):
        engine.broker.commit([first], [])


def test_a_priority_the_pager_refuses_is_an_invalid_argument_and_gives_the_counts_back(engine: Engine) -> None:
    destination, target = engine.queue()
    data, header = message(1)
    with pytest.raises(InvalidArgumentError, match="priority"):
        engine.broker.send(destination, data, (header[0], 10, *header[2:]), True)
    assert engine.counted(destination, target) == (0, 0, 0, 0)
    assert engine.store.collection_len("q/Q") == 0
    assert engine.broker.counters()["sent"] == 0


# ------------------------------------------------------------------ core errors, through the broker


def test_a_store_that_refuses_a_write_is_a_store_full_error(engine: Engine) -> None:
    destination, target = engine.queue()
    engine.store.inject_full_writes(1)
    with pytest.raises(StoreFullError):
        engine.broker.send(destination, *message(1), True)
    assert engine.counted(destination, target) == (0, 0, 0, 0)

    engine.broker.send(destination, *message(2), True)
    items, record = engine.broker.fetch(target, NOW, 1)
    assert record is not None and record.wait(WAIT)
    key = items[0][0]
    engine.store.inject_full_writes(1)
    with pytest.raises(StoreFullError):
        engine.broker.acknowledge([key])
    _, staged = engine.broker.stage(destination, *message(3), True)
    assert isinstance(staged, NativeStagedSend)
    engine.store.inject_full_writes(1)
    with pytest.raises(StoreFullError):
        engine.broker.commit([staged], [key])
    assert engine.counted(destination, target) == (1, 1, 1, 1), "only the fetched one, in a consumer's hands"
    engine.broker.acknowledge([key])
    assert engine.counted(destination, target) == (0, 0, 0, 0)


def test_a_closed_store_is_a_store_closed_error(engine: Engine) -> None:
    destination, target = engine.queue()
    engine.store.close()
    for send in (engine.broker.send, engine.broker.send_async):
        with pytest.raises(StoreClosedError):
            send(destination, *message(1), True)
    assert engine.counted(destination, target) == (0, 0, 0, 0)
    assert engine.broker.counters()["sent"] == 0
    engine.pager.close()
    with pytest.raises(StoreClosedError):
        engine.broker.fetch(target, NOW, 1)


def test_a_message_deleted_behind_the_brokers_back_is_an_unknown_handle_error(engine: Engine) -> None:
    destination, target = engine.queue()
    engine.broker.send(destination, *message(1), True)
    items, record = engine.broker.fetch(target, NOW, 1)
    assert record is not None and record.wait(WAIT)
    (handle,) = engine.store.handles("q/Q")
    engine.store.delete(handle)
    with pytest.raises(UnknownHandleError):
        engine.broker.acknowledge([items[0][0]])
    assert engine.counted(destination, target) == (1, 1, 1, 1), "still in the consumer's hands"


def test_a_body_damaged_on_disk_is_a_corruption_error(tmp_path: Path) -> None:
    # A one-byte message buffer: the persistent body is read back from the store.
    engine = open_engine(tmp_path, message_buffer_size=1)
    destination, target = engine.queue()
    engine.broker.send(destination, *message(1, text="needle-in-the-segment"), True)
    damaged = 0
    for segment in (tmp_path / "store").iterdir():
        content = segment.read_bytes()
        at = content.find(b"needle-in-the-segment")
        if at >= 0:
            with segment.open("r+b") as f:
                f.seek(at)
                f.write(b"N")
            damaged += 1
    assert damaged == 1
    with pytest.raises(CorruptionError) as raised:
        engine.broker.fetch(target, NOW, 1)
    assert isinstance(raised.value, JmsStoreError)
    assert engine.counted(destination, target) == (1, 0, 1, 1), "nothing reserved"
    engine.pager.close()
    engine.store.close()


def test_a_signal_failed_by_an_asynchronous_send_keeps_its_own_error_class(engine: Engine) -> None:
    destination, target = engine.queue()
    data, header = message(1)
    refused: Header = (header[0], 10, *header[2:])  # the pager refuses it once the store has it

    durable = Signal()
    assert engine.broker.send_async(destination, data, refused, True, durable=durable) == (0, None)
    assert durable.wait(WAIT)
    error = durable.error()
    assert isinstance(error, InvalidArgumentError) and not isinstance(error, StorePoisonedError)
    with pytest.raises(InvalidArgumentError):
        durable.result()

    told: list[tuple[int | None, BaseException | None]] = []
    done = threading.Event()

    def callback(handle: int | None, error: BaseException | None) -> None:
        told.append((handle, error))
        done.set()

    engine.broker.send_async(destination, data, refused, True, callback=callback)
    assert done.wait(WAIT)
    assert told[0][0] is None and isinstance(told[0][1], InvalidArgumentError)

    assert engine.counted(destination, target) == (0, 0, 0, 0)
    assert engine.broker.counters()["sent"] == 0
    assert engine.store.collection_len("q/Q") == 0


def test_the_error_kinds_met_outside_the_broker_have_their_classes_too(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(StoreLockedError):
        NativeStore(tmp_path / "store")
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(StoreIOError):
        NativeStore(tmp_path / "a-file" / "store")
    with pytest.raises(CorruptionError, match="codec"):
        decompress("gzip", b"junk", 10)
    selector = NativeSelector(("cmp", "=", ("prop", "color"), ("lit", "red")))
    with pytest.raises(CorruptionError, match="malformed message"):
        selector.matches_message(b"\x01junk", 0)
