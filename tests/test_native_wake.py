"""The native wake-ups the broker's send path rings without the GIL:
``Signal`` (an event) and ``Doorbell`` (who waits on one destination)."""

from __future__ import annotations

import threading
import time

import pytest
from jmsstore._native import Doorbell, Signal


def test_signal_is_an_event() -> None:
    s = Signal()
    assert not s.is_set()
    assert s.wait(0.01) is False
    s.set()
    assert s.is_set() and s.wait() is True and s.wait(0) is True
    s.clear()
    assert not s.is_set()


def test_signal_wakes_a_waiting_thread() -> None:
    s = Signal()
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(s.wait(30)))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive()  # waiting, without holding the GIL (this thread runs)
    s.set()
    waiter.join(10)
    assert woken == [True]


@pytest.mark.parametrize("timeout", [-1.0, float("nan")])
def test_signal_refuses_a_bad_timeout(timeout: float) -> None:
    with pytest.raises(ValueError):
        Signal().wait(timeout)


def test_a_message_wakes_the_consumer_that_went_idle_last_only() -> None:
    bell = Doorbell()
    first, second = Signal(), Signal()
    bell.push_idle(first)
    bell.push_idle(second)
    bell.ring()
    assert second.is_set() and not first.is_set()
    assert bell.waiting() == (0, 1)


def test_while_a_woken_consumer_is_on_its_way_later_messages_wait_for_it() -> None:
    """It takes up to a batch when it looks: waking another consumer per
    message would send most of them to find nothing."""
    bell = Doorbell()
    first, second = Signal(), Signal()
    bell.push_idle(first)
    bell.push_idle(second)
    bell.ring()
    bell.ring(5)
    assert second.is_set() and not first.is_set()
    # The second clears its flag to look again: no longer on its way. It
    # found the messages, so it is not idle either.
    second.clear()
    bell.ring()
    assert first.is_set()


def test_a_woken_consumer_that_gives_up_passes_the_wake_up_on() -> None:
    bell = Doorbell()
    first, second = Signal(), Signal()
    bell.push_idle(first)
    bell.push_idle(second)
    bell.ring()
    bell.forget_idle(second)  # its receive ended (closed, timed out) without looking
    bell.ring()
    assert first.is_set()


def test_pushing_an_idle_consumer_twice_keeps_one_entry_at_the_back() -> None:
    bell = Doorbell()
    first, second = Signal(), Signal()
    bell.push_idle(first)
    bell.push_idle(second)
    bell.push_idle(first)
    assert bell.waiting() == (0, 2)
    bell.ring()
    assert first.is_set() and not second.is_set()


def test_a_consumer_already_woken_does_not_take_a_wake_up() -> None:
    bell = Doorbell()
    busy, idle = Signal(), Signal()
    bell.push_idle(idle)
    bell.push_idle(busy)  # idle last: the one a message wakes...
    busy.set()  # ...but woken already by something else, not waiting
    bell.ring()
    assert idle.is_set()


def test_with_a_selective_consumer_every_idle_consumer_wakes() -> None:
    bell = Doorbell()
    bell.add_selective(1)
    signals = [Signal() for _ in range(3)]
    for s in signals:
        bell.push_idle(s)
    bell.ring()
    assert all(s.is_set() for s in signals)
    bell.add_selective(-1)
    assert bell.selective == 0


def test_listener_sessions_are_rung_on_every_message_until_removed() -> None:
    bell = Doorbell()
    session = Signal()
    bell.add_listener(session)
    bell.ring()
    assert session.is_set()
    session.clear()
    bell.remove_listener(session)
    bell.ring()
    assert not session.is_set()


def test_forgotten_and_all() -> None:
    bell = Doorbell()
    gone, kept = Signal(), Signal()
    bell.push_idle(gone)
    bell.push_idle(kept)
    bell.forget_idle(gone)
    bell.ring()
    assert kept.is_set() and not gone.is_set()
    listener, idle = Signal(), Signal()
    bell.add_listener(listener)
    bell.push_idle(idle)
    bell.ring_all()
    assert listener.is_set() and idle.is_set()
