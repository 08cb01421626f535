"""Receipts of pipelined SENDs: each RECEIPT waits until its SEND is
durable, they come in the order of the frames that asked for them, and
the SENDs share the store's group commit instead of one write each. A
SEND whose store write fails gets an ERROR frame, never a RECEIPT.
Receipted SENDs the connection's native send lane takes queue their
receipts with those of the frames the Python path handles, in frame
order; each names its message's id, and the broker's completer writes it
where that needs no wait."""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jmsstore import JMSServer, Queue, StoreFullError
from jmsstore.net import StompServer, serve
from jmsstore.store import FileStore
from stomp_helpers import WAIT, RawClient, Served


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    opened = FileStore(tmp_path / "home" / "store")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def served(store: FileStore, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[JMSServer, StompServer]]:
    """A STOMP endpoint; ``native_dispatch`` as the test's indirect parameter says (on by default)."""
    jms = JMSServer(store=store, paging_directory=tmp_path / "home" / "paging")
    stomp = serve(jms, port=0, native_dispatch=getattr(request, "param", True))
    try:
        yield jms, stomp
    finally:
        stomp.close()
        jms.close()


@pytest.fixture
def client(served: tuple[JMSServer, StompServer]) -> Iterator[RawClient]:
    r = RawClient(served[1].address, timeout=WAIT)
    assert r.connect().command == "CONNECTED"
    try:
        yield r
    finally:
        r.close()


def send_frame(receipt: str, body: str, destination: str = "/queue/piped") -> bytes:
    """A persistent receipted SEND of a bytes message (it has a content-length)."""
    data = body.encode()
    head = f"SEND\ndestination:{destination}\npersistent:true\nreceipt:{receipt}\ncontent-length:{len(data)}\n\n"
    return head.encode() + data + b"\x00"


def receipt_ids(client: RawClient, count: int) -> list[str | None]:
    """The receipt ids of the next ``count`` frames, each a RECEIPT."""
    received = []
    for _ in range(count):
        frame = client.next_frame()
        assert frame.command == "RECEIPT", frame
        received.append(frame.header("receipt-id"))
    return received


def test_pipelined_receipts_come_in_frame_order_and_share_group_commits(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    jms, _ = served
    count = 300
    frames = [send_frame(f"r{i}", f"m{i}") for i in range(count)]
    # A frame handled at once between them: its receipt still waits its turn.
    frames.insert(count // 2, b"SUBSCRIBE\nid:s\ndestination:/queue/other\nreceipt:sub\n\n\x00")
    expected = [f"r{i}" for i in range(count)]
    expected.insert(count // 2, "sub")
    fsyncs = store.stats()["fsyncs"]
    client.send(b"".join(frames))
    assert receipt_ids(client, len(expected)) == expected
    assert jms.message_count(Queue("piped")) == count
    # One store write each would be one fsync each; pipelined, they share them.
    assert store.stats()["fsyncs"] - fsyncs < count


class FailingWrites:
    """A JMS server whose store writes of messages with the body ``fail``
    fail, as a full disk fails them: reported later, on another thread, as
    the broker's group commit reports them."""

    def __init__(self, jms: JMSServer) -> None:
        self._jms = jms
        self.port = _FailingPort(jms.port)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jms, name)


class _FailingPort:
    def __init__(self, port: Any) -> None:
        self._port = port

    def __getattr__(self, name: str) -> Any:
        return getattr(self._port, name)

    def open_producer(self, *args: Any) -> Any:
        return _FailingProducer(self._port.open_producer(*args))


class _FailingProducer:
    gate: threading.Event | None = None  # when set: completions wait until it opens

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def send_async(self, message: Any, *args: Any, **options: Any) -> int:
        gate = _FailingProducer.gate
        if gate is not None:
            completed = args[-1]

            def held(handle: Any, error: BaseException | None) -> None:
                threading.Thread(target=lambda: (gate.wait(WAIT), completed(handle, error))).start()

            return int(self._producer.send_async(message, *args[:-1], held, **options))
        if message.body != b"fail":
            return int(self._producer.send_async(message, *args, **options))
        completed = args[-1]
        error = StoreFullError("no space left on device (the test's)")
        threading.Thread(target=completed, args=(None, error)).start()
        return 1


def test_a_send_whose_store_write_fails_gets_an_error_never_a_receipt(tmp_path: Path) -> None:
    with JMSServer(tmp_path / "failing") as jms, serve(FailingWrites(jms), port=0) as stomp:
        client = RawClient(stomp.address, timeout=WAIT)
        try:
            assert client.connect().command == "CONNECTED"
            client.send(send_frame("before", "stored") + send_frame("failing", "fail", "/queue/bytes"))
            assert client.next_frame().header("receipt-id") == "before"
            error = client.next_frame()
            assert error.command == "ERROR", error
            assert error.header("receipt-id") == "failing"
            assert "no space left" in (error.header("message") or "")
            assert client.closed_by_server()
            assert all(frame.command != "RECEIPT" for frame in client.frames)
            assert jms.message_count(Queue("piped")) == 1
        finally:
            client.close()


def test_receipts_before_a_failed_send_are_all_sent_first(
    served: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    # The last frame names a destination that cannot exist: an ERROR after the receipts.
    client.send(
        b"".join(send_frame(f"r{i}", f"m{i}") for i in range(20))
        + b"SEND\ndestination:/queue/bad name\nreceipt:bad\n\nx\x00"
    )
    replies = [client.next_frame() for _ in range(21)]
    assert [f.header("receipt-id") for f in replies] == [*(f"r{i}" for i in range(20)), "bad"]
    assert [f.command for f in replies] == ["RECEIPT"] * 20 + ["ERROR"]


def test_disconnect_receipt_comes_after_every_pending_send_is_durable(
    served: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    jms, _ = served
    client.send(b"".join(send_frame(f"r{i}", f"m{i}") for i in range(50)) + b"DISCONNECT\nreceipt:bye\n\n\x00")
    replies = [client.next_frame().header("receipt-id") for _ in range(51)]
    assert replies == [*(f"r{i}" for i in range(50)), "bye"]
    assert jms.message_count(Queue("piped")) == 50


@contextlib.contextmanager
def held_sends(tmp_path: Path, **options: Any) -> Iterator[tuple[threading.Event, StompServer, RawClient]]:
    """A server whose SENDs complete only once the yielded gate is set, and
    a connected raw client."""
    gate = threading.Event()
    _FailingProducer.gate = gate
    try:
        with JMSServer(tmp_path / "held") as jms, serve(FailingWrites(jms), port=0, **options) as stomp:
            client = RawClient(stomp.address, timeout=WAIT)
            try:
                yield gate, stomp, client
            finally:
                client.close()
    finally:
        _FailingProducer.gate = None


def test_the_reader_stops_reading_while_too_many_receipts_are_pending(tmp_path: Path) -> None:
    with held_sends(tmp_path, max_pending_receipts=2) as (gate, stomp, client):
        assert client.connect().command == "CONNECTED"
        client.send(b"".join(send_frame(f"r{i}", f"m{i}") for i in range(5)))
        deadline = time.monotonic() + WAIT
        while stomp.statistics()["frames_in"].get("SEND", 0) < 2:
            assert time.monotonic() < deadline, "the first two SENDs were not read"
            time.sleep(0.02)
        time.sleep(0.3)  # were it reading, the other three would be read by now
        assert stomp.statistics()["frames_in"]["SEND"] == 2
        gate.set()
        assert [client.next_frame().header("receipt-id") for _ in range(5)] == [f"r{i}" for i in range(5)]


def test_heart_beats_go_out_while_the_reader_waits_for_receipt_room(tmp_path: Path) -> None:
    """While too many receipts are pending (the store has not made the
    SENDs durable yet), the reader waits on the store, not on the client;
    the client keeps hearing heart-beats meanwhile, so it does not take the
    server for dead."""
    with held_sends(tmp_path, max_pending_receipts=2, heart_beat=(100, 0)) as (gate, _stomp, client):
        assert client.connect(heart_beat="0,100").header("heart-beat") == "100,0"
        client.send(b"".join(send_frame(f"r{i}", f"m{i}") for i in range(5)))
        deadline = time.monotonic() + WAIT
        received = b""
        client.sock.settimeout(0.1)
        # Negotiated every 100 ms; the server sends one at half of that at the latest.
        while received.count(b"\n") < 4:
            assert time.monotonic() < deadline, f"too few heart-beats: {received!r}"
            with contextlib.suppress(TimeoutError):
                received += client.sock.recv(65536)
        assert received.strip(b"\n") == b"", "no receipt while the store holds the sends"
        client.sock.settimeout(WAIT)
        gate.set()
        assert [client.next_frame().header("receipt-id") for _ in range(5)] == [f"r{i}" for i in range(5)]


def _ack(ack_id: str, receipt: str | None = None) -> bytes:
    line = f"receipt:{receipt}\n" if receipt else ""
    return f"ACK\nid:{ack_id}\n{line}\n\x00".encode()


def test_acks_without_a_receipt_take_the_message_at_once_and_a_receipted_ack_makes_them_durable(
    tmp_path: Path,
) -> None:
    """ACKs without a receipt (ActiveMQ's KahaDB syncs an ACK only when a
    response is asked for) take their messages off the queue at once; an
    ACK with a receipt is durable, with every ACK of its subscription before
    it, when the RECEIPT comes: the server killed (SIGKILL) right after it
    comes back without any of them."""
    home = tmp_path / "home"
    count = 30
    served = Served(home)
    try:
        client = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        try:
            assert client.connect().command == "CONNECTED"
            client.send(b"".join(send_frame(f"r{i}", f"m{i}", "/queue/acked") for i in range(count + 5)))
            assert [client.next_frame().header("receipt-id") for _ in range(count + 5)] == [
                f"r{i}" for i in range(count + 5)
            ]
            client.send(
                b"SUBSCRIBE\nid:s\ndestination:/queue/acked\nack:client-individual\nactivemq.prefetchSize:1000\n\n\x00"
            )
            messages = [client.next_frame() for _ in range(count + 5)]
            assert [m.command for m in messages] == ["MESSAGE"] * (count + 5)
            acks = [str(m.header("ack")) for m in messages]
            # The first count - 1 without a receipt, the count-th with one; the last 5 never.
            client.send(b"".join(_ack(a) for a in acks[: count - 1]) + _ack(acks[count - 1], "acked"))
            receipt = client.next_frame()
            assert receipt.command == "RECEIPT" and receipt.header("receipt-id") == "acked"
        finally:
            client.close()
    finally:
        served.kill()  # SIGKILL: nothing is flushed on the way out
    with JMSServer(home) as jms:
        # The 5 never acknowledged came back; none of the acknowledged did.
        assert jms.message_count(Queue("acked")) == 5


@pytest.mark.parametrize("served", [False], indirect=True, ids=["python-dispatch"])
@pytest.mark.parametrize("socket_write", ["partial", "would-block"])
def test_writes_the_socket_takes_in_part_keep_receipts_whole_and_in_order(
    served: tuple[JMSServer, StompServer], client: RawClient, monkeypatch: pytest.MonkeyPatch, socket_write: str
) -> None:
    """The server's Python writes (MESSAGE frames from the Python
    dispatcher, RECEIPTs from the reader) taken by the socket in part, or not at once,
    finish through the socket's own wait, while the broker's completer
    writes other RECEIPTs natively (what a socket takes of those only in
    part is left to the reader: the core's outbox tests): every RECEIPT
    still arrives whole, in frame order, with the MESSAGE frames between
    them intact."""
    real_write = os.write
    calls = itertools.count()
    socket_writes: list[int] = []  # the Python writers' attempts

    def write(fd: int, data: Any) -> int:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return real_write(fd, data)  # the wake-up pipe
        socket_writes.append(fd)
        if socket_write == "would-block" or next(calls) % 2 == 0:
            if socket_write == "would-block":
                raise BlockingIOError
            return real_write(fd, bytes(data)[:3])
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/piped\nack:auto\n\n\x00")
    count = 60
    # Which writer writes which receipt depends on timing (the dispatcher
    # writing MESSAGE frames holds the write lock): rounds until a Python
    # write was cut short, each checked whole.
    for round_ in range(10):
        client.send(b"".join(send_frame(f"r{round_}-{i}", f"m{round_}-{i}") for i in range(count)))
        receipts, messages = [], []
        while len(receipts) < count or len(messages) < count:
            frame = client.next_frame()
            assert frame.command in ("RECEIPT", "MESSAGE"), frame
            if frame.command == "RECEIPT":
                receipts.append(frame.header("receipt-id"))
            else:
                messages.append(frame.body)
        assert receipts == [f"r{round_}-{i}" for i in range(count)]
        assert sorted(messages) == sorted(f"m{round_}-{i}".encode() for i in range(count))
        if socket_writes:
            break
    assert socket_writes  # a Python write was cut short


@pytest.mark.parametrize(
    ("after", "label"),
    [
        (b"SUBSCRIBE\ndestination:/queue/Q\nreceipt:s\n\n\x00", "a refused frame"),
        (b"DISCONNECT\nreceipt:bye\n\n\x00", "a DISCONNECT"),
    ],
)
def test_a_send_that_fails_while_a_later_frame_waits_gets_the_one_error_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bytes, label: str
) -> None:
    """The SEND's failure comes while the frame after it (refused for want
    of an id, or a DISCONNECT waiting for the sends) waits for the receipts
    before it: the client gets one ERROR frame, the SEND's, and nothing
    after it (no second ERROR, no RECEIPT for the DISCONNECT)."""

    def fails_later(self: _FailingProducer, message: Any, *args: Any, **options: Any) -> int:
        if message.body != b"fail":
            return int(self._producer.send_async(message, *args, **options))
        completed = args[-1]
        error = StoreFullError("no space left on device (the test's)")
        threading.Thread(target=lambda: (time.sleep(0.3), completed(None, error))).start()
        return 1

    monkeypatch.setattr(_FailingProducer, "send_async", fails_later)
    with JMSServer(tmp_path / "failing") as jms, serve(FailingWrites(jms), port=0) as stomp:
        client = RawClient(stomp.address, timeout=WAIT)
        try:
            assert client.connect().command == "CONNECTED"
            client.send(send_frame("failing", "fail", "/queue/Q") + after)
            assert client.closed_by_server(), label
            assert [(f.command, f.header("receipt-id")) for f in client.frames] == [("ERROR", "failing")], label
        finally:
            client.close()


def test_receipted_sends_go_natively_and_each_receipt_names_its_durable_message(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    jms, stomp = served
    client.send(send_frame("first", "by Python", "/queue/R"))  # the first to a destination: the Python path's
    first = client.next_frame()
    assert (first.command, first.header("receipt-id")) == ("RECEIPT", "first")
    count = 50
    client.send(b"".join(send_frame(f"r{i}", f"m{i}", "/queue/R") for i in range(count)))
    receipts = [client.next_frame() for _ in range(count)]
    assert [(r.command, r.header("receipt-id")) for r in receipts] == [("RECEIPT", f"r{i}") for i in range(count)]
    stats = stomp.statistics()
    assert stats["native_sends"] == count
    assert stats["frames_out"]["RECEIPT"] == count + 1
    # Nothing else writes to this client: the threads completing the sends write the receipts themselves.
    assert 0 < stats["receipts_direct"] <= count + 1
    # Each receipt came once its message was durable: all of them are in the store now.
    assert jms.message_count(Queue("R")) == count + 1
    assert store.stats()["puts"] >= count + 1
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/R\n\n\x00")
    messages = [client.next_frame() for _ in range(count + 1)]
    assert [m.body for m in messages] == [b"by Python"] + [f"m{i}".encode() for i in range(count)]
    named = [first.header("message-id")] + [r.header("message-id") for r in receipts]
    assert named == [m.header("message-id") for m in messages]
    assert len(set(named)) == count + 1


def test_receipts_keep_frame_order_across_the_native_and_python_paths(
    served: tuple[JMSServer, StompServer], client: RawClient
) -> None:
    """A frame the Python path handles at once (BEGIN, ABORT) sent right
    behind a persistent SEND the lane took: its receipt waits for the
    SEND's, which waits for the disk."""
    _, stomp = served
    client.send(send_frame("warm-up", "x", "/queue/R"))
    assert client.next_frame().header("receipt-id") == "warm-up"
    expected = []
    for i in range(60):
        client.send(send_frame(f"s{i}", f"m{i}", "/queue/R"))
        client.send(
            f"BEGIN\ntransaction:t{i}\nreceipt:b{i}\n\n\x00ABORT\ntransaction:t{i}\nreceipt:a{i}\n\n\x00".encode()
        )
        expected += [f"s{i}", f"b{i}", f"a{i}"]
    assert receipt_ids(client, len(expected)) == expected
    assert stomp.statistics()["native_sends"] > 0, "the lane took none: the test shows nothing"


def test_a_native_receipted_send_that_fails_gets_an_error_with_its_receipt_id(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    client.send(send_frame("first", "stored", "/queue/R"))
    assert client.next_frame().header("receipt-id") == "first"
    client.send(send_frame("second", "stored too", "/queue/R"))
    assert client.next_frame().header("receipt-id") == "second"
    assert served[1].statistics()["native_sends"] == 1
    store.close()  # the disk goes away under the broker
    client.send(send_frame("failing", "not stored", "/queue/R"))
    error = client.next_frame()
    assert error.command == "ERROR", error
    assert error.header("receipt-id") == "failing"
    assert "a send failed" in error.header("message", "")
    assert client.closed_by_server()


def test_no_ack_after_a_native_send_that_failed_is_settled(
    served: tuple[JMSServer, StompServer], store: FileStore, client: RawClient
) -> None:
    """A SEND the lane takes fails (the store is gone), and ACKs follow it
    in the same read: none of them is settled; the connection ends."""
    _, stomp = served
    client.send(send_frame("first", "one", "/queue/R") + send_frame("second", "two", "/queue/R"))
    assert receipt_ids(client, 2) == ["first", "second"]
    client.send(b"SUBSCRIBE\nid:s\ndestination:/queue/R\nack:client-individual\n\n\x00")
    messages = [client.next_frame() for _ in range(2)]
    assert [m.command for m in messages] == ["MESSAGE", "MESSAGE"]
    store.close()  # the disk goes away under the broker
    failing = b"SEND\ndestination:/queue/R\npersistent:true\n\nnot stored\x00"
    # The SEND cut in two reads (the reader completes it), the ACKs whole after it.
    client.send(failing[:20])
    time.sleep(0.2)
    acks = b"".join(f"ACK\nid:{m.header('ack')}\n\n\x00".encode() for m in messages)
    client.send(failing[20:] + acks)
    assert client.closed_by_server()
    errors = [f for f in client.frames if f.command == "ERROR"]
    assert len(errors) == 1 and "a send failed" in (errors[0].header("message") or "")
    assert stomp.statistics()["native_acks"] == 0
