"""Hostile input against the STOMP server: clients that never finish a
frame, oversized headers and bodies, floods of connections and of
incomplete frames. The server cuts off the offender, keeps serving the
others, and its memory stays bounded. Loopback only; every wait is
bounded; no timing assertions."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, Queue
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.connection import StompConnection
from jmsstore.net.stomp.frames import FrameLimits
from jmsstore.net.stomp.settings import HEAD_ALLOWANCE
from stomp_helpers import WAIT, RawClient, Served

_MiB = 1024 * 1024


@pytest.fixture
def jms(tmp_path: Path) -> Iterator[JMSServer]:
    server = JMSServer(tmp_path / "home")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def make_stomp(jms: JMSServer) -> Iterator[Callable[..., StompServer]]:
    started: list[StompServer] = []

    def make(**options: Any) -> StompServer:
        started.append(serve(jms, port=0, **options))
        return started[-1]

    yield make
    for server in started:
        server.close()


@pytest.fixture
def raw() -> Iterator[Callable[[StompServer], RawClient]]:
    opened: list[RawClient] = []

    def open_(server: StompServer) -> RawClient:
        opened.append(RawClient(server.address, timeout=WAIT))
        return opened[-1]

    yield open_
    for r in opened:
        r.close()


def still_serves(server: StompServer, raw: Callable[[StompServer], RawClient], receipt: str = "ok") -> None:
    """A fresh client connects, sends with a receipt and gets it: the server serves others."""
    r = raw(server)
    assert r.connect().command == "CONNECTED"
    r.send(f"SEND\ndestination:/queue/alive\nreceipt:{receipt}\n\nstill here\x00".encode())
    reply = r.next_frame()
    assert (reply.command, reply.header("receipt-id")) == ("RECEIPT", receipt)
    r.close()


def eventually(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def nothing_buffered(server: StompServer) -> None:
    """The server holds no incomplete frame once the connections it cut off are closed."""
    eventually(lambda: server.statistics()["buffered_bytes"] == 0)


def error_message(r: RawClient) -> str:
    frame = r.next_frame()
    assert frame.command == "ERROR", frame
    return frame.header("message") or ""


# ---------------------------------------------------------------- slow senders


def test_a_client_that_never_sends_connect_is_cut_off_and_others_are_served(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(connect_timeout=1.0)
    silent = raw(server)
    partial = raw(server)
    partial.send(b"CONNECT\naccept-version:1.2\nho")  # and never the rest
    still_serves(server, raw)
    assert "CONNECT" in error_message(silent)
    assert silent.closed_by_server()
    assert "CONNECT" in error_message(partial)
    assert partial.closed_by_server()
    assert server.statistics()["timeouts"] == 2


def test_a_frame_never_finished_is_cut_off_by_the_frame_timeout(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(frame_timeout=1.0)
    slow = raw(server)
    assert slow.connect().command == "CONNECTED"
    slow.send(b"SEND\ndestination:/queue/q\ncontent-length:100\n\nonly part of the body")
    still_serves(server, raw)
    assert "not completed" in error_message(slow)
    assert slow.closed_by_server()
    nothing_buffered(server)


def test_a_frame_trickled_byte_by_byte_is_cut_off_all_the_same(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(frame_timeout=1.0)
    slow = raw(server)
    assert slow.connect().command == "CONNECTED"
    stop = threading.Event()

    def trickle() -> None:
        # Each byte is a sign of life, but the frame never ends.
        with contextlib.suppress(OSError):
            slow.send(b"SEND\ndestination:/queue/q\n\n")
            while not stop.wait(0.05):
                slow.send(b"x")

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        assert "not completed" in error_message(slow)
        assert slow.closed_by_server()
    finally:
        stop.set()
        trickler.join(WAIT)
    still_serves(server, raw)


def test_an_idle_timeout_cuts_off_a_connected_client_that_sends_nothing(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(idle_timeout=1.0)
    idle = raw(server)
    assert idle.connect().command == "CONNECTED"
    assert "nothing received" in error_message(idle)
    assert idle.closed_by_server()


# ---------------------------------------------------------------- oversized frames


@pytest.mark.parametrize(
    ("frame", "said"),
    [
        (b"SEND\ndestination:/queue/q\nx-long:" + b"v" * 20_000 + b"\n\n\x00", "header line"),
        (b"SEND\ndestination:/queue/q\n" + b"h:v\n" * 1001 + b"\n\x00", "headers"),
        (b"SEND\ndestination:/queue/q\ncontent-length:99999999999999\n\n", "body is larger"),
        (b"SEND\ndestination:/queue/q\n\n" + b"x" * 70_000, "body is larger"),
    ],
    ids=["header-line", "header-count", "declared-body", "streamed-body"],
)
def test_oversized_headers_and_bodies_are_refused_and_others_are_served(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient], frame: bytes, said: str
) -> None:
    server = make_stomp(frame_limits=FrameLimits(max_frame_bytes=80_000, max_body_bytes=64_000))
    r = raw(server)
    assert r.connect().command == "CONNECTED"
    with contextlib.suppress(OSError):  # the server may close before it has read everything
        r.send(frame)
    assert said in error_message(r)
    assert r.closed_by_server()
    still_serves(server, raw)
    nothing_buffered(server)


def test_frame_limits_follow_the_brokers_largest_message(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "small", maximum_message_size=4096) as jms, serve(jms, port=0) as server:
        assert server.frame_limits.max_body_bytes == 4096
        assert server.frame_limits.max_frame_bytes == 4096 + HEAD_ALLOWANCE
        r = RawClient(server.address, timeout=WAIT)
        try:
            assert r.connect().command == "CONNECTED"
            r.send(b"SEND\ndestination:/queue/q\ncontent-length:5000\n\n" + b"x" * 5000 + b"\x00")
            assert "4096" in error_message(r)
        finally:
            r.close()


# ---------------------------------------------------------------- floods


def test_a_flood_of_connections_over_the_limit_is_refused_and_the_rest_are_served(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient], jms: JMSServer
) -> None:
    limit, extra = 20, 30
    server = make_stomp(max_connections=limit)
    admitted = [raw(server) for _ in range(limit)]
    for r in admitted:
        assert r.connect().command == "CONNECTED"
    refused = [raw(server) for _ in range(extra)]
    for r in refused:
        assert "too many connections" in error_message(r)
        assert r.closed_by_server()
    # Every admitted connection still works.
    for i, r in enumerate(admitted):
        r.send(f"SEND\ndestination:/queue/flood\nreceipt:r{i}\n\nm{i}\x00".encode())
        assert r.next_frame().header("receipt-id") == f"r{i}"
    stats = server.statistics()
    assert stats["connections_refused"] == extra
    assert stats["connections_open"] == limit
    assert jms.message_count(Queue("flood")) == limit
    for r in admitted:
        r.close()
    # Room again once the server has seen them go.
    eventually(lambda: server.statistics()["connections_open"] == 0)
    deadline_client = raw(server)
    assert deadline_client.connect().command == "CONNECTED"


def test_incomplete_frames_over_the_servers_budget_cut_off_the_client_that_goes_over(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(
        max_buffered_bytes=2 * _MiB, frame_limits=FrameLimits(max_frame_bytes=2 * _MiB, max_body_bytes=2 * _MiB - 100)
    )
    head = b"SEND\ndestination:/queue/big\nreceipt:done\ncontent-length:1200000\n\n"
    first = raw(server)
    assert first.connect().command == "CONNECTED"
    first.send(head + b"x" * 1_100_000)
    eventually(lambda: server.statistics()["buffered_bytes"] > 1_100_000)  # the first's part is held
    second = raw(server)
    assert second.connect().command == "CONNECTED"
    with contextlib.suppress(OSError):
        second.send(head + b"y" * 1_100_000)
    assert "incomplete frames" in error_message(second)
    assert second.closed_by_server()
    # The first, within the budget, finishes its frame and is served.
    first.send(b"x" * 100_000 + b"\x00")
    assert first.next_frame().header("receipt-id") == "done"
    first.close()
    still_serves(server, raw)


def test_the_server_wide_subscription_limit_refuses_one_more(
    make_stomp: Callable[..., StompServer], raw: Callable[[StompServer], RawClient]
) -> None:
    server = make_stomp(max_total_subscriptions=2)

    def subscribe(r: RawClient, destination: str) -> str:
        r.send(f"SUBSCRIBE\nid:s\ndestination:{destination}\nreceipt:sub\n\n\x00".encode())
        frame = r.next_frame()
        return frame.header("receipt-id") if frame.command == "RECEIPT" else f"ERROR {frame.header('message')}"

    first, second, third = raw(server), raw(server), raw(server)
    for r in (first, second, third):
        assert r.connect().command == "CONNECTED"
    assert subscribe(first, "/queue/a") == "sub"
    assert subscribe(second, "/queue/b") == "sub"
    assert "most subscriptions" in subscribe(third, "/queue/c")
    assert third.closed_by_server()
    first.send(b"UNSUBSCRIBE\nid:s\nreceipt:gone\n\n\x00")
    assert first.next_frame().header("receipt-id") == "gone"
    fourth = raw(server)
    assert fourth.connect().command == "CONNECTED"
    assert subscribe(fourth, "/queue/c") == "sub"  # the slot is free again
    assert server.statistics()["subscriptions"] == 2


# ---------------------------------------------------------------- memory of a served process


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read a process's RSS")
def test_memory_stays_bounded_under_a_flood_of_incomplete_large_frames(tmp_path: Path) -> None:
    """128 clients each send 1 MiB of a frame they never finish: held
    without a bound that is 128 MiB; the budget keeps it to 16 MiB."""
    served = Served(tmp_path / "home", "--max-buffered-bytes", "16M", "--max-connections", "200")
    sockets: list[socket.socket] = []
    try:
        warm = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        assert warm.connect().command == "CONNECTED"
        warm.close()
        before = _rss_bytes(served.proc.pid)
        head = b"SEND\ndestination:/queue/q\ncontent-length:10000000\n\n"
        chunk = b"z" * _MiB
        for _ in range(128):
            sock = socket.create_connection(("127.0.0.1", served.port), timeout=WAIT)
            sockets.append(sock)
            with contextlib.suppress(OSError):  # cut off already: the budget at work
                sock.sendall(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00" + head + chunk)
        # The server has read the flood: all but the 15 that fit in 16 MiB were cut off.
        deadline = time.monotonic() + 3 * WAIT
        while sum("incomplete frames" in line for line in list(served.log)) < 100:
            assert time.monotonic() < deadline, "the server did not read the flood in time"
            time.sleep(0.05)
        probe = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        assert probe.connect().command == "CONNECTED"
        probe.send(b"SEND\ndestination:/queue/alive\nreceipt:r\n\nx\x00")
        assert probe.next_frame().header("receipt-id") == "r"
        probe.close()
        grown = _rss_bytes(served.proc.pid) - before
        assert grown < 80 * _MiB, f"the server grew by {grown / _MiB:.0f} MiB"
    finally:
        for sock in sockets:
            sock.close()
        served.kill()


def test_a_connection_refused_for_want_of_a_thread_is_closed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No thread for a new connection: the client gets an ERROR frame and
    the end of the stream at once, even though the connection's outbox had
    made a duplicate of its socket (it is let go, not left to the garbage
    collector)."""

    def no_thread(self: StompConnection) -> None:
        raise RuntimeError("can't start new thread (the test's)")

    with JMSServer(tmp_path / "home") as jms, serve(jms, port=0) as stomp:
        monkeypatch.setattr(StompConnection, "start", no_thread)
        gc.disable()  # the connection object may live on: its socket must not
        try:
            client = RawClient(stomp.address, timeout=WAIT)
            try:
                assert client.closed_by_server()
                assert [f.command for f in client.frames] == ["ERROR"]
            finally:
                client.close()
        finally:
            gc.enable()
        assert stomp.statistics()["connections_refused"] == 1
