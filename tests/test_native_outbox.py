"""The binding of a STOMP connection's outbox (``NativeOutbox``): its
write lock as Python uses a ``threading.Lock``, receipts queued and taken
in frame order, the reader's wake-up, and the errors it raises."""

from __future__ import annotations

import errno
import os
import select
import socket
import threading
import time

import pytest
from jmsstore._native import NativeOutbox


def test_the_write_lock_acts_as_a_threading_lock() -> None:
    outbox = NativeOutbox(None)
    assert outbox.acquire()
    assert not outbox.acquire(False)
    started = time.monotonic()
    assert not outbox.acquire(True, 0.05)
    assert time.monotonic() - started >= 0.04
    threading.Timer(0.05, outbox.release).start()
    assert outbox.acquire(True, 30.0)  # waits without the GIL: the timer thread runs
    outbox.release()
    with outbox:
        assert not outbox.acquire(False)
    assert outbox.acquire(False)
    outbox.release()


def test_receipts_go_out_in_frame_order_with_their_message_ids() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        outbox = NativeOutbox(ours.fileno())
        send = outbox.push("send-1", False, False)  # a SEND being handled
        subscribe = outbox.push("sub", False, False)
        outbox.ready(subscribe, True)
        outbox.set_message_id(send, "ID:jms1-1-7")
        outbox.ready(send, False)
        assert not outbox.has_work(), "the SEND is not durable yet: the SUBSCRIBE's waits"
        assert outbox.pending() == 2
        outbox.complete(send)  # written at once by this thread: nothing else holds the lock
        theirs.settimeout(30)
        expected = b"RECEIPT\nreceipt-id:send-1\nmessage-id:ID\\cjms1-1-7\n\n\0RECEIPT\nreceipt-id:sub\n\n\0"
        got = b""
        while len(got) < len(expected):
            got += theirs.recv(4096)
        assert got == expected
        assert outbox.statistics() == {
            "receipts": 2,
            "receipts_direct": 2,
            "wakeups": 0,
            "messages": 0,
            "message_writes": 0,
        }


def test_what_the_completer_cannot_write_wakes_the_reader() -> None:
    outbox = NativeOutbox(None)  # TLS: only the reader writes
    ticket = outbox.push("r", True, False)
    poller = select.poll()
    poller.register(outbox.wake_fd, select.POLLIN)
    assert poller.poll(0) == []
    outbox.complete(ticket, "the disk is full")
    assert poller.poll(1000) != []
    assert os.read(outbox.wake_fd, 64)
    with outbox:
        assert outbox.take_tail() == b""
        frames, count, failed = outbox.take_done()
    assert (frames, count, failed) == (b"", 0, ("r", "the disk is full"))
    assert outbox.wait_all_done(0.0)
    assert outbox.wait_for_room(1, 0.0)


def test_bad_arguments_raise_typed_errors_and_change_nothing() -> None:
    with pytest.raises(OSError) as closed:
        NativeOutbox(10_000)  # no such descriptor: nothing is duplicated
    assert closed.value.errno == errno.EBADF
    outbox = NativeOutbox(None)
    with pytest.raises(OverflowError):
        outbox.ready(-1, True)
    with pytest.raises(TypeError):
        outbox.push(b"bytes", True, True)  # type: ignore[arg-type]
    outbox.complete(12345)  # an unknown ticket (its frame failed and was discarded): nothing happens
    assert outbox.pending() == 0
