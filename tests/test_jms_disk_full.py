"""A real full disk under the broker (bad input: "nothing lost").

The child (tests/disk_full_child.py) mounts a 4 MiB tmpfs in its own user
and mount namespace and fills it with a ``JMSServer``'s store until the
kernel answers ``ENOSPC``. Every send that cannot be stored must fail with
a typed error (``StoreFullError``; a transaction's commit with
``TransactionRolledBackError`` caused by it), give back its quota charge and
counts, and leave every stored message intact. Once the tmpfs is grown (an
operator freeing space), the same server goes on: every stored message is
delivered exactly once, in order, and new sends are stored again.
"""

from __future__ import annotations

from typing import Any

import pytest
from namespace_helpers import run_child_in_namespace


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_child_in_namespace("disk_full_child.py", tmp_path_factory.mktemp("full"))


def test_a_send_on_a_full_disk_raises_store_full_error(seen: dict[str, Any]) -> None:
    assert seen["sent"] > 100  # the store held messages before the disk filled
    assert seen["sync_error"] == "StoreFullError"
    assert "No space left on device" in seen["sync_error_text"]


def test_async_sends_on_a_full_disk_fail_their_futures_and_listeners(seen: dict[str, Any]) -> None:
    """JMS 2.0 §7.3.5: the completion listener's onException for a send that failed."""
    assert seen["async_errors"] == ["StoreFullError"] * 10
    assert seen["listener_future_errors"] == ["StoreFullError"] * 5
    assert seen["listener_errors"] == ["StoreFullError"] * 5


def test_a_commit_on_a_full_disk_rolls_back(seen: dict[str, Any]) -> None:
    assert seen["commit_error"] == "TransactionRolledBackError"
    assert seen["commit_error_cause"] == "StoreFullError"


def test_failed_sends_give_their_quota_charge_and_counts_back(seen: dict[str, Any]) -> None:
    before, after = seen["at_first_failure"], seen["after_failures"]
    assert after == before
    assert after["message_count"] == after["server_sent"] == after["quota_messages"] == seen["sent"]
    assert after["queue_messages_current"] == seen["sent"]
    assert after["quota_bytes"] == after["queue_bytes_current"] > seen["sent"] * 8192
    assert after["messages_pending"] == 0


def test_with_room_again_every_stored_message_comes_once_and_sends_go_on(seen: dict[str, Any]) -> None:
    # On the full disk a receive needs room for its delivery record: it
    # gets a message or reports the full disk, and loses nothing either way.
    assert seen["receive_while_full"] in ("message", "StoreFullError")
    assert seen["received"] == list(range(seen["sent"]))
    assert seen["redelivered"] == 0
    assert seen["send_after_room"] == 1
    assert seen["after_restart"] == 1
