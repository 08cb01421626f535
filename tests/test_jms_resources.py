"""Resource-control policy (seed 000, "Tuning WebLogic JMS"): quotas and
blocked senders, flow-control thresholds, the producers' flow rate, and
the expired-message log text. The server-level behaviour built on these is
in test_jms_quotas.py."""

from __future__ import annotations

import threading
import time

import pytest
from jmsstore import InvalidArgumentError, ResourceAllocationError
from jmsstore.broker.expiry import expired_message_log, parse_logging_policy
from jmsstore.broker.limits import (
    FlowControl,
    Quota,
    QuotaUsage,
    Thresholds,
    gauge,
)


class FakeClock:
    """A clock the test moves; sleeping moves it too."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


# ---------------------------------------------------------------- flow control


def test_flow_rate_decays_geometrically_then_climbs_linearly() -> None:
    """Table 12-3: starts at Flow Maximum when armed; each of Flow Steps over
    Flow Interval halves it here (100, 50, 25, 12.5) down to Flow Minimum;
    disarmed, it climbs by (max - min) / steps per step and is unlimited
    only once it reaches Flow Maximum."""
    clock = FakeClock()
    flow = FlowControl(maximum=100, minimum=12.5, interval=3, steps=3, clock=clock)
    armed = True
    rates = []
    for t in range(6):
        clock.now = float(t)
        rates.append(flow.evaluate(lambda: armed))
    assert rates == [100, 50, 25, 12.5, 12.5, 12.5]  # the minimum is the floor
    armed = False
    up = []
    for t in range(6, 9):
        clock.now = float(t)
        up.append(flow.evaluate(lambda: armed))
    step = (100 - 12.5) / 3
    assert up[0] == pytest.approx(12.5 + step)
    assert up[1] == pytest.approx(12.5 + 2 * step)
    assert up[2] is None  # reached the maximum: no longer flow controlled


def test_flow_rate_is_unlimited_until_armed_and_restarts_at_the_maximum() -> None:
    clock = FakeClock()
    flow = FlowControl(maximum=500, minimum=50, interval=60, steps=10, clock=clock)
    assert flow.evaluate(lambda: False) is None
    clock.now = 30
    assert flow.evaluate(lambda: True) == 500
    clock.now = 36  # one step of 6 s
    assert flow.evaluate(lambda: True) == pytest.approx(500 * (50 / 500) ** 0.1)


def test_a_step_evaluates_the_condition_at_each_step() -> None:
    """Several steps passed at once: one adjustment per step, each looking at the condition."""
    clock = FakeClock()
    flow = FlowControl(maximum=80, minimum=10, interval=3, steps=3, clock=clock)
    flow.evaluate(lambda: True)
    clock.now = 3.0  # three steps at once: armed, armed, disarmed
    answers = iter([True, True, False])
    assert flow.evaluate(lambda: next(answers)) == pytest.approx(20 + 70 / 3)


def test_a_flow_controlled_producer_paces_its_sends() -> None:
    clock = FakeClock()
    flow = FlowControl(maximum=100, minimum=10, interval=60, steps=10, clock=clock)
    waited = [flow.before_send(lambda: True) for _ in range(5)]
    assert waited[0] == 0
    assert waited[1:] == pytest.approx([0.01] * 4)  # 100 messages per second
    assert clock.now == pytest.approx(0.04)
    unlimited = FlowControl(maximum=100, minimum=10, interval=60, steps=10, clock=FakeClock())
    assert [unlimited.before_send(lambda: False) for _ in range(3)] == [0, 0, 0]


# ---------------------------------------------------------------- thresholds


def test_thresholds_arm_above_high_and_disarm_below_low() -> None:
    """Table 12-4: armed above the high threshold, disarmed below the low
    one, unchanged in between; with both kinds set, disarmed only once below
    both."""
    g = gauge(Thresholds(messages_threshold_high=10, messages_threshold_low=5))
    g.add(10, 0)
    assert not g.armed
    g.add(1, 0)
    assert g.armed
    g.sub(4, 0)  # 7: between
    assert g.armed
    g.sub(3, 0)  # 4: below low
    assert not g.armed
    g.add(3, 0)  # 7: between, stays disarmed
    assert not g.armed
    both = gauge(Thresholds(bytes_threshold_high=1000, bytes_threshold_low=100, messages_threshold_high=10))
    both.add(1, 1001)
    assert both.armed
    both.sub(0, 501)
    assert both.armed
    both.sub(0, 401)  # 99 bytes, 1 message (below its high threshold, no low one)
    assert not both.armed
    stats = both.statistics()
    assert (stats["messages_current"], stats["bytes_current"], stats["bytes_high"], stats["messages_received"]) == (
        1,
        99,
        1001,
        1,
    )


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="messages_threshold_low"):
        Thresholds(messages_threshold_high=5, messages_threshold_low=6)
    with pytest.raises(InvalidArgumentError, match="-1"):
        Thresholds(bytes_threshold_high=-2)
    with pytest.raises(TypeError):
        Thresholds(bytes_threshold_high=1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- quotas


def test_quota_settings_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="policy"):
        Quota("q", policy="lifo")
    with pytest.raises(InvalidArgumentError, match="messages_maximum"):
        Quota("q", messages_maximum=-5)
    with pytest.raises(TypeError, match="shared"):
        Quota("q", shared="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="name"):
        Quota("")


def test_a_full_quota_refuses_at_once_without_a_timeout() -> None:
    usage = QuotaUsage(Quota("q", messages_maximum=2), "quota 'q'")
    usage.acquire(1, 10, 0)
    usage.acquire(1, 10, 0)
    with pytest.raises(ResourceAllocationError, match="quota 'q' is full"):
        usage.acquire(1, 10, 0)
    assert (usage.messages, usage.bytes) == (2, 20)
    usage.release(1, 10)
    usage.acquire(1, 10, 0)
    assert usage.statistics()["messages_high"] == 2


def test_a_request_that_can_never_fit_fails_at_once() -> None:
    usage = QuotaUsage(Quota("q", bytes_maximum=100), "quota 'q'")
    start = time.monotonic()
    with pytest.raises(ResourceAllocationError, match="can never fit"):
        usage.acquire(1, 101, 30)
    assert time.monotonic() - start < 5
    assert usage.messages == 0


def test_a_blocked_sender_times_out_with_the_documented_error() -> None:
    usage = QuotaUsage(Quota("q", messages_maximum=1), "quota 'q'")
    usage.acquire(1, 1, 0)
    with pytest.raises(ResourceAllocationError, match=r"no room appeared within 0\.05 s"):
        usage.acquire(1, 1, 0.05)
    assert usage.blocked_senders == 0


def _blocked_sender(usage: QuotaUsage, size: int, order: list[int], owner: object = None) -> threading.Thread:
    def send() -> None:
        try:
            usage.acquire(1, size, 30, owner)
            order.append(size)
        except ResourceAllocationError:
            order.append(-size)

    before = usage.blocked_senders
    t = threading.Thread(target=send)
    t.start()
    deadline = time.monotonic() + 10
    while usage.blocked_senders == before and time.monotonic() < deadline:
        time.sleep(0.001)
    return t


def test_fifo_lets_no_send_pass_one_waiting_before_it() -> None:
    """FIFO: "No send request is permitted to complete when there another
    send request is waiting for space before it" -- even one that would fit."""
    usage = QuotaUsage(Quota("q", bytes_maximum=100, policy="fifo"), "quota 'q'")
    usage.acquire(1, 95, 0)
    order: list[int] = []
    big = _blocked_sender(usage, 60, order)  # waits for 60 bytes
    small = _blocked_sender(usage, 5, order)  # 5 would fit now, but waits behind it
    with pytest.raises(ResourceAllocationError):
        usage.acquire(1, 5, 0)  # and so does a new one
    time.sleep(0.05)
    assert order == []
    usage.release(1, 95)
    big.join(10)
    small.join(10)
    assert order == [60, 5]


def test_preemptive_lets_a_send_that_fits_go_first() -> None:
    """Preemptive: "if there is sufficient space for the current request,
    then that space is used even if there are previous requests waiting"."""
    usage = QuotaUsage(Quota("q", bytes_maximum=100, policy="preemptive"), "quota 'q'")
    usage.acquire(1, 95, 0)
    order: list[int] = []
    big = _blocked_sender(usage, 60, order)
    usage.acquire(1, 5, 0)  # fits now: passes the waiting one
    usage.release(1, 5)
    small = threading.Thread(target=lambda: (usage.acquire(1, 5, 30), order.append(5)))
    small.start()
    small.join(10)
    assert order == [5]
    usage.release(1, 95)
    big.join(10)
    assert order == [5, 60]


def test_failing_the_waiters_of_a_destination_leaves_the_others() -> None:
    usage = QuotaUsage(Quota("q", messages_maximum=1), "quota 'q'")
    usage.acquire(1, 1, 0)
    order: list[int] = []
    mine = _blocked_sender(usage, 2, order, owner="orders")
    theirs = _blocked_sender(usage, 3, order, owner="audit")
    assert usage.fail_waiting("orders", "orders changed quota") == 1
    mine.join(10)
    assert order == [-2]
    usage.release(1, 1)
    theirs.join(10)
    assert order == [-2, 3]


# ---------------------------------------------------------------- expiration log


def test_expired_message_log_matches_the_seed_examples() -> None:
    headers = {"JMSPriority": 7, "JMSRedelivered": False, "JMSCorrelationID": None, "JMSType": ""}
    properties = {"Make": "Honda", "Model": "Civic", "Color": "White", "Weight": 2680}
    assert expired_message_log(
        "ID:P<851839.1022176920343.0",
        headers,
        properties,
        parse_logging_policy("JMSPriority, JMSRedelivered, Make, Model, Color, Weight"),
    ) == (
        "<ExpiredJMSMessage JMSMessageID='ID:P<851839.1022176920343.0' >\n"
        " <HeaderFields JMSPriority='7' JMSRedelivered='false' />\n"
        " <UserProperties Make='Honda' Model='Civic' Color='White' Weight='2680' />\n"
        "</ExpiredJMSMessage>"
    )
    # Nothing asked for (or nothing of it exists): the short form.
    assert expired_message_log("ID:N<223476.1022177121567.1", headers, properties, parse_logging_policy("")) == (
        "<ExpiredJMSMessage JMSMessageID='ID:N<223476.1022177121567.1' />"
    )
    assert expired_message_log("ID:x", headers, properties, parse_logging_policy("Missing, JMSXGroupID")) == (
        "<ExpiredJMSMessage JMSMessageID='ID:x' />"
    )
    # Cut at 32 characters, null without quotes, empty string as ''.
    assert expired_message_log(
        "ID:N<851839.1022176920344.0",
        headers,
        {"First": "Any string longer than 32 characters", "Second": None, "Third": ""},
        parse_logging_policy("First, Second, Third"),
    ) == (
        "<ExpiredJMSMessage JMSMessageID='ID:N<851839.1022176920344.0' >\n"
        " <UserProperties First='Any string longer than 32 char ...' Second=null Third='' />\n"
        "</ExpiredJMSMessage>"
    )


def test_expired_message_log_keywords() -> None:
    headers = {"JMSPriority": 4, "JMSCorrelationID": "c-1", "JMSMessageID": "ID:1"}
    properties = {"b": 2, "a": 1}
    text = expired_message_log("ID:1", headers, properties, parse_logging_policy("%header%, %properties%"))
    # JMSMessageID once, in the opening tag
    assert text.splitlines()[1] == " <HeaderFields JMSPriority='4' JMSCorrelationID='c-1' />"
    assert text.splitlines()[2] == " <UserProperties a='1' b='2' />"
    only_id = expired_message_log("ID:1", headers, properties, parse_logging_policy("JMSMessageID"))
    assert only_id == "<ExpiredJMSMessage JMSMessageID='ID:1' />"  # always there, never twice


@pytest.mark.parametrize("policy", ["%headers%", "a,,b"])
def test_bad_logging_policies_are_refused(policy: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_logging_policy(policy)
