"""Quotas, blocking senders, broker-wide limits and flow control on a
running server (seed 000, "Defining Quota", "Blocking Senders During Quota
Conditions", "Controlling the Flow of Messages"; seed 002 for the
broker-wide limits). The policy objects alone are tested in
test_jms_resources.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from jms_helpers import SOON, Servers, connect, drain, receive_all, texts
from jmsstore import (
    AckMode,
    DeliveryMode,
    IllegalStateError,
    InvalidArgumentError,
    JMSServer,
    Message,
    Queue,
    ResourceAllocationError,
    TextMessage,
)


def receive_some(server: JMSServer, queue: Queue, count: int) -> list[Message]:
    """Receives and acknowledges (AUTO) ``count`` messages."""
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        got = [consumer.receive(SOON) for _ in range(count)]
    assert all(m is not None for m in got)
    return [m for m in got if m is not None]


def _wait_until_blocked(server: JMSServer) -> None:
    """Until a sender waits for room (or SOON has passed)."""
    deadline = time.monotonic() + SOON
    while server.statistics()["blocked_senders"] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)


def _producer(server: JMSServer, destination: object, **factory: object) -> object:
    connection = server.connection_factory(**factory).create_connection()
    return connection.create_session().create_producer(destination)


def test_a_full_server_quota_refuses_a_send_at_once_with_no_send_timeout(server: JMSServer, servers: Servers) -> None:
    """Send Timeout 0: "you will receive a resource allocation exception
    whenever sufficient space is not available"; nothing is stored."""
    server = servers.restart(server, messages_maximum=3)
    queue = server.create_queue("Q")
    with server.connection_factory(send_timeout=0).create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(3):
            producer.send(TextMessage(f"m{i}"))
        with pytest.raises(ResourceAllocationError, match="the server's quota is full"):
            producer.send(TextMessage("over"))
        with pytest.raises(ResourceAllocationError):
            producer.send_async(TextMessage("over"))
    assert server.message_count(queue) == 3
    stats = server.statistics()
    assert stats["server_quota"]["messages"] == 3
    assert stats["queues"]["Q"]["messages_current"] == 3
    # Room again once one is consumed.
    assert texts(receive_some(server, queue, 1)) == ["m0"]
    _producer(server, queue, send_timeout=0).send(TextMessage("fits"))  # type: ignore[attr-defined]
    assert texts(receive_all(server, queue)) == ["m1", "m2", "fits"]


def test_pending_messages_count_against_the_quota(server: JMSServer, servers: Servers) -> None:
    """Table 12-2: messages in flight, unacknowledged or in an uncommitted
    transaction count; a rollback gives their room back."""
    server = servers.restart(server, messages_maximum=2)
    queue = server.create_queue("Q")
    with connect(server) as connection:
        transacted = connection.create_session(transacted=True)
        transacted.create_producer(queue).send(TextMessage("t"))  # uncommitted: counts
        assert server.statistics()["queues"]["Q"]["messages_pending"] == 1
        plain = server.connection_factory(send_timeout=0).create_connection()
        producer = plain.create_session().create_producer(queue)
        producer.send(TextMessage("a"))
        with pytest.raises(ResourceAllocationError):
            producer.send(TextMessage("b"))
        transacted.rollback()
        producer.send(TextMessage("b"))
        # Received but not acknowledged (CLIENT): still counts.
        client = connection.create_session(ack_mode=AckMode.CLIENT)
        consumer = client.create_consumer(queue)
        connection.start()
        received = consumer.receive(SOON)
        assert received is not None
        with pytest.raises(ResourceAllocationError):
            producer.send(TextMessage("c"))
        stats = server.statistics()
        # Both are in the consumer's hands (received, or prefetched): pending.
        assert (stats["messages_current"], stats["messages_pending"]) == (2, 2)
        assert stats["queues"]["Q"]["messages_pending"] == 2
        received.acknowledge()
        assert server.statistics()["queues"]["Q"]["messages_pending"] == 1
        producer.send(TextMessage("c"))
        plain.close()
    assert texts(receive_all(server, queue)) == ["b", "c"]


def test_a_blocked_sender_goes_on_when_room_appears(server: JMSServer, servers: Servers) -> None:
    server = servers.restart(server, messages_maximum=1)
    queue = server.create_queue("Q")
    producer = _producer(server, queue, send_timeout=30_000)
    producer.send(TextMessage("first"))  # type: ignore[attr-defined]
    sent = threading.Event()

    def send_second() -> None:
        producer.send(TextMessage("second"))  # type: ignore[attr-defined]
        sent.set()

    sender = threading.Thread(target=send_second)
    sender.start()
    _wait_until_blocked(server)
    assert server.statistics()["blocked_senders"] == 1
    assert server.statistics()["queues"]["Q"]["blocked_senders"] == 1
    assert not sent.is_set()
    assert texts(receive_some(server, queue, 1)) == ["first"]
    sender.join(SOON)
    assert sent.is_set()
    assert texts(receive_all(server, queue)) == ["second"]


def test_a_blocked_sender_times_out_with_resource_allocation_error(server: JMSServer, servers: Servers) -> None:
    server = servers.restart(server, messages_maximum=1)
    queue = server.create_queue("Q")
    producer = _producer(server, queue, send_timeout=100)
    producer.send(TextMessage("first"))  # type: ignore[attr-defined]
    start = time.monotonic()
    with pytest.raises(ResourceAllocationError, match=r"no room appeared within 0\.1 s"):
        producer.send(TextMessage("second"))  # type: ignore[attr-defined]
    assert time.monotonic() - start >= 0.09
    assert server.message_count(queue) == 1


def test_quota_resources_shared_or_per_destination(server: JMSServer) -> None:
    """Quota Sharing: destinations referring to a shared quota compete for
    it; an unshared quota gives each destination its own allowance. A
    destination with its own quota does not use the server's."""
    server.create_quota("pool", messages_maximum=2)
    server.create_quota("each", messages_maximum=2, shared=False)
    a, b = server.create_queue("A", quota="pool"), server.create_queue("B", quota="pool")
    c, d = server.create_queue("C", quota="each"), server.create_queue("D", quota="each")
    with server.connection_factory(send_timeout=0).create_connection() as connection:
        session = connection.create_session()
        session.create_producer(a).send(TextMessage("a"))
        session.create_producer(b).send(TextMessage("b"))
        with pytest.raises(ResourceAllocationError, match="quota 'pool' is full"):
            session.create_producer(a).send(TextMessage("a2"))
        for destination in (c, c, d, d):
            session.create_producer(destination).send(TextMessage("x"))
        with pytest.raises(ResourceAllocationError, match="quota 'each' of 'C'"):
            session.create_producer(c).send(TextMessage("c3"))
    stats = server.statistics()
    assert [u["messages"] for u in stats["quotas"]["pool"]] == [2]
    assert sorted(u["messages"] for u in stats["quotas"]["each"]) == [2, 2]
    assert stats["server_quota"]["messages"] == 0


def test_switching_quota_fails_the_sends_blocked_on_the_old_one(server: JMSServer) -> None:
    """Seed 000: "if there are unsatisfied requests for quota when the quota
    resource is changed, then those requests will fail with a
    javax.jms.ResourceAllocationException"."""
    server.create_quota("small", messages_maximum=1)
    server.create_quota("large", messages_maximum=100)
    queue = server.create_queue("Q", quota="small")
    producer = _producer(server, queue, send_timeout=30_000)
    producer.send(TextMessage("first"))  # type: ignore[attr-defined]
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            producer.send(TextMessage("blocked"))  # type: ignore[attr-defined]
        except BaseException as e:
            errors.append(e)

    sender = threading.Thread(target=blocked)
    sender.start()
    _wait_until_blocked(server)
    server.set_quota(queue, "large")
    sender.join(SOON)
    assert len(errors) == 1 and isinstance(errors[0], ResourceAllocationError)
    assert "changed quota" in str(errors[0])
    # The message it holds moved to the new quota, which has room.
    stats = server.statistics()
    assert [u["messages"] for u in stats["quotas"]["large"]] == [1]
    assert [u["messages"] for u in stats["quotas"]["small"]] == [0]
    producer.send(TextMessage("after"))  # type: ignore[attr-defined]
    assert texts(receive_all(server, queue)) == ["first", "after"]


def test_quotas_survive_a_restart_and_recovered_messages_count(server: JMSServer, servers: Servers) -> None:
    server.create_quota("q1", messages_maximum=2, bytes_maximum=1 << 20, policy="preemptive")
    queue = server.create_queue("Q", quota="q1")
    producer = _producer(server, queue)
    producer.send(TextMessage("a"))  # type: ignore[attr-defined]
    producer.send(TextMessage("b"))  # type: ignore[attr-defined]
    server = servers.restart(server)
    assert server.quotas()["q1"].policy == "preemptive"
    assert server.settings(queue).quota == "q1"
    with pytest.raises(ResourceAllocationError):
        _producer(server, queue, send_timeout=0).send(TextMessage("c"))  # type: ignore[attr-defined]
    assert texts(receive_all(server, queue)) == ["a", "b"]


def test_a_topic_message_counts_once_per_subscription(server: JMSServer) -> None:
    topic = server.create_topic("T")
    with connect(server, client_id="c") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "s1").close()
        session.create_durable_subscriber(topic, "s2").close()
        session.create_producer(topic).send(TextMessage("m"))
    stats = server.statistics()
    assert stats["topics"]["T"]["messages_current"] == 2
    assert stats["messages_current"] == 2
    # Each durable subscription has its own counts.
    for sub in stats["durable_subscriptions"]:
        assert (sub["messages_current"], sub["messages_high"], sub["messages_received"]) == (1, 1, 1)
        assert sub["bytes_current"] == sub["bytes_received"] > 0
    with connect(server, client_id="c") as connection:
        drain(connection.create_session().create_durable_subscriber(topic, "s1"))
    [s1] = [s for s in server.durable_subscriptions() if s["name"] == "s1"]
    assert (s1["messages_current"], s1["messages_high"], s1["messages_received"]) == (0, 1, 1)


def test_broker_wide_limits_reject_persistent_and_drop_non_persistent(server: JMSServer, servers: Servers) -> None:
    """Seed 002: past imq.system.max_count "if a message is persistent then
    the client runtime will throw an exception ... if the message is
    non-persistent, the broker silently drops the message"."""
    server = servers.restart(server, system_max_count=2)
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        producer.send(TextMessage("a"))
        producer.send(TextMessage("b"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        with pytest.raises(ResourceAllocationError, match="system_max_count 2"):
            producer.send(TextMessage("c"))
        producer.send(TextMessage("dropped"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        assert producer.send_async(TextMessage("dropped too"), delivery_mode=DeliveryMode.NON_PERSISTENT).result(SOON)
    stats = server.statistics()
    assert stats["dropped_over_system_limit"] == 2
    assert texts(receive_all(server, queue)) == ["a", "b"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


def test_an_armed_destination_slows_its_producers(server: JMSServer) -> None:
    """Table 12-4: past Messages Threshold High the destination is armed and
    its producers send at Flow Maximum, then less; below the low threshold
    it disarms and they climb back."""
    queue = server.create_queue("Q", messages_threshold_high=3, messages_threshold_low=1)
    clock = FakeClock()
    factory = dict(flow_maximum=10, flow_minimum=1, flow_interval=10, flow_steps=5, clock=clock)
    with server.connection_factory(**factory).create_connection() as connection:  # type: ignore[arg-type]
        producer = connection.create_session().create_producer(queue)
        for _ in range(4):
            producer.send(TextMessage("m"))
        assert clock.slept == 0  # not armed while sending these
        assert server.statistics()["queues"]["Q"]["flow_control_armed"]
        for _ in range(3):
            producer.send(TextMessage("m"))
        assert clock.slept == pytest.approx(0.2)  # 10 messages/s: 0.1 s apart
        assert server.statistics()["flow_controlled_producers"] == 1
        assert server.statistics()["queues"]["Q"]["flow_controlled_producers"] == 1
        clock.now += 2.0  # one flow step later, still armed: 10 * (1/10) ** (1/5)
        producer.send(TextMessage("m"))
        assert producer.flow_limit == pytest.approx(10 * 0.1**0.2)  # type: ignore[union-attr]
    assert len(receive_all(server, queue)) == 8
    assert not server.statistics()["queues"]["Q"]["flow_control_armed"]


def test_flow_control_can_be_turned_off(server: JMSServer, servers: Servers) -> None:
    server = servers.restart(server, messages_threshold_high=0)
    queue = server.create_queue("Q")
    clock = FakeClock()
    with server.connection_factory(flow_control_enabled=False, clock=clock).create_connection() as connection:
        producer = connection.create_session().create_producer(queue)
        for _ in range(5):
            producer.send(TextMessage("m"))
    assert clock.slept == 0
    assert server.statistics()["flow_control_armed"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"messages_maximum": -2}, InvalidArgumentError),
        ({"blocking_send_policy": "lifo"}, InvalidArgumentError),
        ({"system_max_size": "big"}, TypeError),
        ({"messages_threshold_high": 5, "messages_threshold_low": 9}, InvalidArgumentError),
        # Past the core's 64-bit counters: refused, not an OverflowError once stored.
        ({"messages_maximum": 1 << 63}, InvalidArgumentError),
        ({"system_max_count": 1 << 63}, InvalidArgumentError),
        ({"bytes_threshold_high": 1 << 64}, InvalidArgumentError),
        # Refused after the store opened: what the open created goes again.
        ({"paging_codec": "nope"}, InvalidArgumentError),
        ({"message_buffer_size": -1}, InvalidArgumentError),
        ({"maximum_message_size": 1 << 40}, InvalidArgumentError),
        ({"maximum_message_size": 0}, InvalidArgumentError),
        ({"progress": 5}, TypeError),
    ],
)
def test_bad_server_limits_are_refused_before_anything_opens(
    server_dir: Path, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        JMSServer(server_dir, **options)  # type: ignore[arg-type]
    assert not server_dir.exists(), "a failed open leaves nothing behind"


def test_a_failed_open_of_an_existing_server_keeps_everything(servers: Servers, server_dir: Path) -> None:
    server = servers.open()
    server.create_queue("Q")
    server.close()
    before = sorted(str(p.relative_to(server_dir)) for p in server_dir.rglob("*"))
    with pytest.raises(InvalidArgumentError, match="codec"):
        JMSServer(server_dir, paging_codec="nope")
    assert sorted(str(p.relative_to(server_dir)) for p in server_dir.rglob("*")) == before
    assert servers.open().destinations() == [Queue("Q")]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.create_queue("Q2", messages_threshold_high=1 << 63),
        lambda s: s.create_queue("Q", bytes_threshold_high=1 << 63),
        lambda s: s.create_topic("T", bytes_threshold_high=1 << 64),
        lambda s: s.create_quota("big", messages_maximum=1 << 63),
        lambda s: s.create_quota("used", messages_maximum=1 << 63),
    ],
    ids=["new queue", "existing queue", "topic", "new quota", "quota in use"],
)
def test_a_limit_past_64_bits_changes_nothing_and_the_server_reopens(
    servers: Servers, call: Callable[[JMSServer], object]
) -> None:
    server = servers.open()
    server.create_quota("used", messages_maximum=5)
    server.create_queue("Q", quota="used")
    settings, quotas = server.settings(Queue("Q")), server.quotas()
    with pytest.raises(InvalidArgumentError, match="up to 9223372036854775807"):
        call(server)
    assert server.destinations() == [Queue("Q")]
    assert (server.settings(Queue("Q")), server.quotas()) == (settings, quotas)
    reopened = servers.restart(server)
    assert reopened.destinations() == [Queue("Q")]
    assert reopened.quotas() == quotas


@pytest.mark.parametrize("closing", ["connection", "server"])
def test_a_sender_blocked_on_a_full_quota_is_let_go_when_its_connection_closes(servers: Servers, closing: str) -> None:
    """WebLogic's blocking send waits up to the send timeout for room; closing
    the connection (or the server) ends the wait at once with
    ``IllegalStateError``, not a quota error at the end of the timeout, and
    the message is not sent."""
    server = servers.open()
    server.create_quota("one", messages_maximum=1)
    queue = server.create_queue("Q", quota="one")
    connection = server.connection_factory(send_timeout=600_000).create_connection()
    session = connection.create_session()
    producer = session.create_producer(queue)
    producer.send(TextMessage("fill"))
    outcome: list[BaseException] = []

    def send_blocked() -> None:
        try:
            producer.send(TextMessage("blocked"))
        except BaseException as e:
            outcome.append(e)

    sender = threading.Thread(target=send_blocked)
    sender.start()
    _wait_until_blocked(server)
    assert server.statistics()["blocked_senders"] == 1
    (connection if closing == "connection" else server).close()
    sender.join(SOON)
    assert not sender.is_alive(), "the close let the blocked sender go"
    assert [type(e) for e in outcome] == [IllegalStateError]
    if closing == "server":
        server = servers.open()
    assert texts(receive_all(server, queue)) == ["fill"]


def test_bad_quota_settings_change_nothing(server: JMSServer) -> None:
    with pytest.raises(InvalidArgumentError, match="no quota 'missing'"):
        server.create_queue("Q", quota="missing")
    assert server.destinations() == []
    queue = server.create_queue("Q")
    with pytest.raises(InvalidArgumentError, match="no quota 'missing'"):
        server.set_quota(queue, "missing")
    assert server.settings(queue).quota is None
    with pytest.raises(InvalidArgumentError, match="policy"):
        server.create_quota("q", policy="lifo")
    assert server.quotas() == {}
    server.create_quota("q", messages_maximum=1)
    with pytest.raises(InvalidArgumentError, match="shared"):
        server.create_quota("q", shared=False)
    with pytest.raises(InvalidArgumentError):
        server.connection_factory(flow_minimum=10, flow_maximum=5)
    with pytest.raises(TypeError):
        server.connection_factory(send_timeout=1.5)


def test_statistics_show_paged_messages(server: JMSServer, servers: Servers) -> None:
    """A destination's paged count: messages whose bodies went out of memory
    (the server's message_buffer_size is far below the backlog)."""
    server = servers.restart(server, message_buffer_size=8 << 10)
    queue = server.create_queue("Q")
    with connect(server) as connection:
        producer = connection.create_session().create_producer(queue)
        for i in range(40):
            producer.send(TextMessage(f"{i:04d}" + "x" * 1020))
    stats = server.statistics()
    paged = stats["queues"]["Q"]["messages_paged"]
    assert 0 < paged < 40
    assert paged == stats["pager"]["messages"] - stats["pager"]["resident_messages"]
    assert len(receive_all(server, queue)) == 40
    assert server.statistics()["queues"]["Q"]["messages_paged"] == 0


def test_counts_return_to_zero_after_a_mixed_workload(server: JMSServer, servers: Servers) -> None:
    """Every way a message comes and goes keeps the counts right: once
    everything is consumed, the server, its destinations, subscriptions and
    quotas hold nothing and nothing is pending."""
    server = servers.restart(server, messages_maximum=10_000)
    server.create_quota("q", messages_maximum=10_000, shared=False)
    dlq = server.create_queue("DLQ")
    queue = server.create_queue("Q", quota="q", redelivery_limit=1, error_destination="DLQ")
    topic = server.create_topic("T", messages_limit_override=3)
    with connect(server, "mix") as connection:
        session = connection.create_session()
        session.create_durable_subscriber(topic, "d").close()
        producer = session.create_producer(None)
        for i in range(10):
            producer.send(TextMessage(f"s{i}"), destination=queue)
            producer.send_async(TextMessage(f"a{i}"), destination=queue).result(SOON)
            producer.send(TextMessage(f"t{i}"), destination=topic)
            producer.send(TextMessage(f"n{i}"), destination=queue, delivery_mode=DeliveryMode.NON_PERSISTENT)
        transacted = connection.create_session(transacted=True)
        transacted.create_producer(queue).send(TextMessage("rolled back"))
        transacted.rollback()
        transacted.create_producer(queue).send(TextMessage("committed"))
        transacted.commit()
        # CLIENT: receive some, recover twice (past the redelivery limit: to the DLQ), acknowledge the rest.
        client = connection.create_session(ack_mode=AckMode.CLIENT)
        consumer = client.create_consumer(queue)
        for _ in range(2):
            assert consumer.receive(SOON) is not None
            client.recover()
        consumer.close()
        stats = server.statistics()
        assert (stats["queues"]["Q"]["messages_current"], stats["queues"]["DLQ"]["messages_current"]) == (30, 1)
        assert stats["topics"]["T"]["messages_current"] == 3  # the subscription limit
    for destination in (queue, dlq):
        receive_all(server, destination)
    with connect(server, "mix") as connection:
        drain(connection.create_session().create_durable_subscriber(topic, "d"))
    stats = server.statistics()
    assert (stats["messages_current"], stats["bytes_current"], stats["messages_pending"]) == (0, 0, 0)
    for kind in ("queues", "topics"):
        for name, figures in stats[kind].items():
            assert (figures["messages_current"], figures["messages_pending"]) == (0, 0), (kind, name)
    assert stats["durable_subscriptions"][0]["messages_current"] == 0
    assert all(u["messages"] == 0 for u in stats["quotas"]["q"]) and stats["server_quota"]["messages"] == 0
    assert server.stats.underflows() == 0  # nothing was counted out twice on the way


def test_a_rollback_after_its_subscription_went_counts_nothing_twice(server: JMSServer) -> None:
    """A transaction's send to a non-durable subscription that closed before
    the rollback: the subscription's drop took its counts already."""
    topic = server.create_topic("T")
    queue = server.create_queue("Q")
    with connect(server) as connection:
        subscriber = connection.create_session().create_consumer(topic)
        transacted = connection.create_session(transacted=True)
        transacted.create_producer(topic).send(TextMessage("t"))
        transacted.create_producer(queue).send(TextMessage("q"))
        subscriber.close()
        transacted.rollback()
    stats = server.statistics()
    assert (stats["messages_current"], stats["messages_pending"], stats["server_quota"]["messages"]) == (0, 0, 0)
    assert server.stats.underflows() == 0


@pytest.mark.parametrize("policy", ["fifo", "preemptive"])
def test_the_servers_blocking_send_policy(server: JMSServer, servers: Servers, policy: str) -> None:
    """Seed 000, "Specifying a Blocking Send Policy on JMS Servers": with a
    large send waiting, a small one that fits waits behind it (FIFO) or goes
    first (preemptive)."""
    server = servers.restart(server, bytes_maximum=4000, blocking_send_policy=policy)
    queue = server.create_queue("Q")
    filler = _producer(server, queue, send_timeout=0)
    filler.send(TextMessage("f" * 3000))  # type: ignore[attr-defined]
    big = _producer(server, queue, send_timeout=30_000)
    waiting = threading.Thread(target=lambda: big.send(TextMessage("b" * 2000)))  # type: ignore[attr-defined]
    waiting.start()
    _wait_until_blocked(server)
    small = _producer(server, queue, send_timeout=0)
    if policy == "fifo":
        with pytest.raises(ResourceAllocationError):
            small.send(TextMessage("s"))  # type: ignore[attr-defined]
    else:
        small.send(TextMessage("s"))  # type: ignore[attr-defined]
    receive_some(server, queue, 1)  # the filler goes: room for the big one
    waiting.join(SOON)
    assert not waiting.is_alive()
    expected = ["b" * 2000] if policy == "fifo" else ["s", "b" * 2000]
    assert texts(receive_all(server, queue)) == expected


def test_the_servers_limits_change_at_runtime_or_not_at_all(server: JMSServer) -> None:
    queue = server.create_queue("Q")
    producer = _producer(server, queue, send_timeout=0)
    producer.send(TextMessage("a"))  # type: ignore[attr-defined]
    server.set_limits(messages_maximum=1)
    with pytest.raises(ResourceAllocationError, match="the server's quota is full"):
        producer.send(TextMessage("b"))  # type: ignore[attr-defined]
    before = server.statistics()["server_quota"]
    with pytest.raises(InvalidArgumentError, match="policy"):
        server.set_limits(messages_maximum=50, blocking_send_policy="lifo")
    with pytest.raises(InvalidArgumentError, match="system_max_count"):
        server.set_limits(messages_maximum=50, system_max_count=-3)
    with pytest.raises(InvalidArgumentError, match="unknown server limit"):
        server.set_limits(messages_maximum=50, colour=1)
    with pytest.raises(InvalidArgumentError, match="bytes_threshold_high"):
        server.set_limits(messages_maximum=50, bytes_threshold_high=1 << 63)
    with pytest.raises(InvalidArgumentError, match="system_max_count"):
        server.set_limits(messages_maximum=50, system_max_count=1 << 70)
    assert server.statistics()["server_quota"] == before  # nothing applied
    assert server.system_max_count == -1
    server.set_limits(messages_maximum=-1, system_max_count=1, messages_threshold_high=0)
    with pytest.raises(ResourceAllocationError, match="system_max_count 1"):
        producer.send(TextMessage("c"))  # type: ignore[attr-defined]
    assert server.statistics()["flow_control_armed"]
    server.set_limits(system_max_count=-1)
    producer.send(TextMessage("d"))  # type: ignore[attr-defined]
    assert texts(receive_all(server, queue)) == ["a", "d"]
