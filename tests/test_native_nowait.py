"""The binding of the core's never-waiting socket write (``write_nowait``),
which the STOMP server's completion thread writes receipts with: what
it converts, and the errors it raises."""

from __future__ import annotations

import errno
import socket

import pytest
from jmsstore._native import write_nowait


def test_it_writes_what_the_socket_takes_and_never_waits() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        assert write_nowait(ours.fileno(), b"RECEIPT\nreceipt-id:7\n\n\0") == 23
        assert theirs.recv(64) == b"RECEIPT\nreceipt-id:7\n\n\0"
        written = 0
        while (n := write_nowait(ours.fileno(), b"x" * 65536)) > 0:
            written += n
        assert written > 0  # filled, then 0 at once instead of waiting
        theirs.setblocking(False)
        read = 0
        while True:
            try:
                chunk = theirs.recv(1 << 20)
            except BlockingIOError:
                break
            read += len(chunk)
        assert read == written


def test_a_closed_socket_and_a_closed_peer_raise_oserror() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.close()
    try:
        with pytest.raises(OSError) as broken:
            write_nowait(ours.fileno(), b"x")
        assert isinstance(broken.value, (BrokenPipeError, ConnectionResetError))
        assert broken.value.errno in (errno.EPIPE, errno.ECONNRESET)
    finally:
        ours.close()
    with pytest.raises(OSError) as closed:
        write_nowait(ours.fileno(), b"x")  # fileno() is -1 once closed
    assert closed.value.errno == errno.EBADF


def test_the_data_must_be_bytes() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(TypeError):
        write_nowait(ours.fileno(), "text")  # type: ignore[arg-type]
