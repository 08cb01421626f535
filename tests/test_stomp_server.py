"""The STOMP 1.2 server against a client no one here wrote (stomp.py), and
against raw sockets for what a well-behaved client never sends. Loopback
only; every wait is bounded."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stomp
from jmsstore import BytesMessage, DeliveryMode, JMSServer, Queue, TextMessage, Topic
from jmsstore.errors import IllegalStateError, InvalidArgumentError
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import FrameLimits
from jmsstore.net.stomp.subscription import Subscription
from stomp_helpers import RawClient, disconnect_unless_closed

WAIT = 5.0


class Collector(stomp.ConnectionListener):  # type: ignore[misc]
    """Everything a stomp.py connection receives, with bounded waits."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: list[Any] = []
        self.receipts: list[str] = []
        self.errors: list[Any] = []
        self.heartbeats = 0
        self.connected: Any = None
        self.disconnected = False

    def _add(self, change: Callable[[], None]) -> None:
        with self.cond:
            change()
            self.cond.notify_all()

    def on_connected(self, frame: Any) -> None:
        self._add(lambda: setattr(self, "connected", frame))

    def on_message(self, frame: Any) -> None:
        self._add(lambda: self.messages.append(frame))

    def on_receipt(self, frame: Any) -> None:
        self._add(lambda: self.receipts.append(frame.headers["receipt-id"]))

    def on_error(self, frame: Any) -> None:
        self._add(lambda: self.errors.append(frame))

    def on_heartbeat(self) -> None:
        def count() -> None:
            self.heartbeats += 1

        self._add(count)

    def on_disconnected(self) -> None:
        self._add(lambda: setattr(self, "disconnected", True))

    def wait(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), "timed out"

    def wait_messages(self, count: int) -> list[Any]:
        self.wait(lambda: len(self.messages) >= count)
        return list(self.messages)

    def wait_receipt(self, receipt: str) -> None:
        self.wait(lambda: receipt in self.receipts)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def jms(home: Path) -> Iterator[JMSServer]:
    server = JMSServer(home)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def make_stomp(jms: JMSServer) -> Iterator[Callable[..., StompServer]]:
    started: list[StompServer] = []

    def make(**options: Any) -> StompServer:
        server = serve(jms, port=0, **options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.close()


@pytest.fixture
def served(make_stomp: Callable[..., StompServer]) -> StompServer:
    return make_stomp()


Client = tuple[stomp.Connection12, Collector]


@pytest.fixture
def client(served: StompServer) -> Iterator[Callable[..., Client]]:
    """``client(**connect_headers)``: a connected stomp.py connection to ``served``."""
    opened: list[stomp.Connection12] = []

    def connect(server: StompServer = served, heartbeats: tuple[int, int] = (0, 0), **headers: str) -> Client:
        conn = stomp.Connection12([server.address], heartbeats=heartbeats, auto_decode=False, timeout=WAIT)
        collector = Collector()
        conn.set_listener("collector", collector)
        opened.append(conn)
        conn.connect(wait=True, headers=headers)
        return conn, collector

    yield connect
    for conn in opened:
        disconnect_unless_closed(conn)


def eventually(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def disconnect(conn: stomp.Connection12, collector: Collector) -> None:
    """Disconnects and waits for the DISCONNECT's receipt (everything before it is done)."""
    conn.disconnect(receipt="bye")
    collector.wait_receipt("bye")


@pytest.fixture
def raw(served: StompServer) -> Iterator[Callable[..., RawClient]]:
    opened: list[RawClient] = []

    def open_(server: StompServer = served) -> RawClient:
        opened.append(RawClient(server.address))
        return opened[-1]

    yield open_
    for r in opened:
        r.close()


# ---------------------------------------------------------------- connecting


def test_connected_frame_names_version_server_session_and_heart_beat(make_stomp: Callable[..., StompServer]) -> None:
    served = make_stomp(heart_beat=(200, 300))
    conn = stomp.Connection12([served.address], heartbeats=(100, 500), auto_decode=False, timeout=WAIT)
    collector = Collector()
    conn.set_listener("c", collector)
    conn.connect(wait=True)
    try:
        headers = collector.connected.headers
        assert headers["version"] == "1.2"
        assert headers["server"].startswith("jmsstore/")
        assert headers["session"]
        # We send every max(200, 500) ms; the client sends every max(100, 300) ms.
        assert headers["heart-beat"] == "500,300"
    finally:
        conn.disconnect()


def test_heart_beats_flow_both_ways(make_stomp: Callable[..., StompServer]) -> None:
    # Intervals with room for a loaded machine: a silence of twice the interval ends the connection.
    served = make_stomp(heart_beat=(500, 500))
    conn = stomp.Connection12([served.address], heartbeats=(500, 500), auto_decode=False, timeout=WAIT)
    collector = Collector()
    conn.set_listener("c", collector)
    conn.connect(wait=True)
    try:
        collector.wait(lambda: collector.heartbeats >= 3)
        time.sleep(1.5)  # well past twice the interval: the client's heart-beats keep it alive
        assert conn.is_connected()
        assert served.statistics()["heartbeat_timeouts"] == 0
    finally:
        conn.disconnect()


def test_a_client_that_stops_sending_heart_beats_is_cut_off(
    make_stomp: Callable[..., StompServer], raw: Callable[..., RawClient]
) -> None:
    served = make_stomp(heart_beat=(0, 100))
    r = raw(served)
    started = time.monotonic()  # before CONNECT: the server's count of silence starts when it reads it
    connected = r.connect(heart_beat="100,0")
    assert connected.header("heart-beat") == "0,100"
    assert r.closed_by_server()
    assert 0.15 < time.monotonic() - started < WAIT
    assert served.statistics()["heartbeat_timeouts"] == 1


def test_a_client_without_stomp_1_2_gets_an_error_with_the_version(raw: Callable[..., RawClient]) -> None:
    r = raw()
    r.send(b"CONNECT\naccept-version:1.0,1.1\nhost:x\n\n\x00")
    error = r.next_frame()
    assert error.command == "ERROR"
    assert error.header("version") == "1.2"
    assert r.closed_by_server()


def test_a_sends_receipt_tells_the_message_id_the_consumer_sees(raw: Callable[..., RawClient]) -> None:
    """A SEND's RECEIPT carries the JMS message id the server gave the
    message (persistent or not, in a transaction too), the one its MESSAGE
    frame has."""
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/ids\npersistent:true\nreceipt:p\n\none\x00")
    r.send(b"SEND\ndestination:/queue/ids\nreceipt:n\n\ntwo\x00")
    r.send(b"BEGIN\ntransaction:t\n\n\x00SEND\ndestination:/queue/ids\ntransaction:t\nreceipt:t\n\nthree\x00")
    r.send(b"COMMIT\ntransaction:t\nreceipt:c\n\n\x00")
    receipts = [r.next_frame() for _ in range(4)]
    assert [f.command for f in receipts] == ["RECEIPT"] * 4
    assert [f.header("receipt-id") for f in receipts] == ["p", "n", "t", "c"]
    ids = [f.header("message-id") for f in receipts[:3]]
    assert all(i is not None and i.startswith("ID:") for i in ids) and len(set(ids)) == 3
    assert receipts[3].header("message-id") is None  # a COMMIT's receipt names no message
    r.send(b"SUBSCRIBE\ndestination:/queue/ids\nid:s\nack:auto\n\n\x00")
    messages = [r.next_frame() for _ in range(3)]
    # Not in send order necessarily: a persistent message joins its queue once
    # it is durable, and JMS lets a NON_PERSISTENT one sent after it go first.
    assert {m.body: m.header("message-id") for m in messages} == dict(zip([b"one", b"two", b"three"], ids, strict=True))


def test_a_frame_before_connect_is_an_error(raw: Callable[..., RawClient]) -> None:
    r = raw()
    r.send(b"SEND\ndestination:/queue/q\n\nhi\x00")
    assert r.next_frame().command == "ERROR"
    assert r.closed_by_server()


def test_a_malformed_frame_closes_that_connection_and_others_keep_working(
    served: StompServer, client: Callable[..., Client], raw: Callable[..., RawClient], jms: JMSServer
) -> None:
    good, collector = client()
    good.subscribe("/queue/q", id="s")
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/q\nbad\\escape:x\n\nbody\x00")
    error = r.next_frame()
    assert error.command == "ERROR"
    assert "escape" in (error.header("message") or "")
    assert r.closed_by_server()
    good.send("/queue/q", b"still here", receipt="r")
    collector.wait_receipt("r")
    assert collector.wait_messages(1)[0].body == b"still here"
    time.sleep(0.2)
    assert len(collector.messages) == 1  # nothing of the bad frame was sent
    assert served.statistics()["errors"] == 1


def test_frames_before_a_malformed_one_are_handled_first(raw: Callable[..., RawClient], jms: JMSServer) -> None:
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/first\nreceipt:ok\n\nkept\x00NOT-A-COMMAND\n\n\x00")
    receipt = r.next_frame()
    assert (receipt.command, receipt.header("receipt-id")) == ("RECEIPT", "ok")
    error = r.next_frame()
    assert error.command == "ERROR" and "NOT-A-COMMAND" in (error.header("message") or "")
    assert r.closed_by_server()
    assert jms.message_count(Queue("first")) == 1


def test_a_frame_over_the_limits_is_refused(
    make_stomp: Callable[..., StompServer], raw: Callable[..., RawClient]
) -> None:
    served = make_stomp(frame_limits=FrameLimits(max_body_bytes=1000))
    r = raw(served)
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/big\ncontent-length:5000\n\n" + b"x" * 5000 + b"\x00")
    error = r.next_frame()
    assert error.command == "ERROR" and "1000" in (error.header("message") or "")
    assert r.closed_by_server()


def test_an_unknown_destination_kind_is_an_error(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.send("/exchange/x", b"body")
    collector.wait(lambda: bool(collector.errors))
    assert "/queue/NAME" in collector.errors[0].headers["message"]


def test_too_many_connections_get_an_error(
    make_stomp: Callable[..., StompServer], raw: Callable[..., RawClient]
) -> None:
    served = make_stomp(max_connections=1)
    first = raw(served)
    assert first.connect().command == "CONNECTED"
    second = raw(served)
    assert second.next_frame().command == "ERROR"
    assert second.closed_by_server()
    assert served.statistics()["connections_refused"] == 1


# ---------------------------------------------------------------- sending and receiving


def test_text_binary_and_utf8_bodies_round_trip_with_receipts(client: Callable[..., Client], jms: JMSServer) -> None:
    conn, collector = client()
    binary = bytes(range(256)) + b"\x00\x00end"
    text = "grüße, 日本, ✓"
    conn.send("/queue/bodies", binary, receipt="r1", persistent="true")
    conn.send("/queue/bodies", text.encode("utf-8"), receipt="r2")
    collector.wait_receipt("r2")
    assert collector.receipts == ["r1", "r2"]
    assert jms.message_count(Queue("bodies")) == 2  # stored and visible when the receipt came
    conn.subscribe("/queue/bodies", id="s")
    # JMS orders a producer's messages within a delivery mode: the non-persistent
    # one may be visible before the persistent one is on disk.
    first, second = sorted(collector.wait_messages(2), key=lambda m: "persistent" not in m.headers)
    assert first.body == binary
    assert first.headers["content-length"] == str(len(binary))
    assert first.headers["persistent"] == "true"
    assert "persistent" not in second.headers  # ActiveMQ's STOMP default: non-persistent
    assert second.body.decode("utf-8") == text


def test_content_length_decides_text_or_bytes_message(served: StompServer, jms: JMSServer) -> None:
    """As ActiveMQ maps them: no content-length, a TextMessage; with one, a BytesMessage."""
    conn = stomp.Connection12([served.address], auto_content_length=False, auto_decode=False, timeout=WAIT)
    collector = Collector()
    conn.set_listener("c", collector)
    conn.connect(wait=True)
    try:
        conn.send("/queue/kinds", "é text".encode(), receipt="r1")
        conn.send("/queue/kinds", b"raw", headers={"content-length": "3"}, receipt="r2")
        collector.wait_receipt("r2")
    finally:
        conn.disconnect()
    with jms.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(Queue("kinds"))
        text = consumer.receive(WAIT)
        data = consumer.receive(WAIT)
    assert isinstance(text, TextMessage) and text.text == "é text"
    assert isinstance(data, BytesMessage) and data.body == b"raw"


def test_jms_headers_and_properties_map_both_ways(client: Callable[..., Client], jms: JMSServer) -> None:
    conn, collector = client()
    expires = int(time.time() * 1000) + 600_000
    conn.send(
        "/queue/headers",
        b"x",
        receipt="r",
        persistent="true",
        priority="7",
        expires=str(expires),
        type="order",
        headers={
            "correlation-id": "c-1",
            "reply-to": "/queue/replies",
            "color": "red",
            "note": "a:b\nc\\d",  # escaped on the wire both ways
            "content-type": "a/b",
        },
    )
    collector.wait_receipt("r")
    with jms.connection_factory().create_connection() as connection:
        connection.start()
        session = connection.create_session()
        message = session.create_consumer(Queue("headers")).receive(WAIT)
        assert message is not None
        assert message.delivery_mode == DeliveryMode.PERSISTENT
        assert message.priority == 7
        # Sent as a time to live from the server's clock: off by the milliseconds the send took.
        assert expires <= message.expiration < expires + 1000
        assert message.type == "order"
        assert message.correlation_id == "c-1"
        assert message.reply_to == Queue("replies")
        # content-type is no JMS property name: not kept.
        assert message.properties == {"color": "red", "note": "a:b\nc\\d"}
        # And back: a message sent by a JMS client, received over STOMP.
        out = TextMessage("from jms")
        out.set_property("size", 3)
        out.set_property("fragile", True)
        out.set_property("path", "x:y\nz")
        out.correlation_id = "c-2"
        out.reply_to = Topic("news")
        jms.create_queue("back")
        session.create_producer(Queue("back")).send(out, priority=2, delivery_mode=DeliveryMode.NON_PERSISTENT)
    conn.subscribe("/queue/back", id="s")
    frame = collector.wait_messages(1)[0]
    headers = frame.headers
    assert frame.body == b"from jms"
    assert headers["subscription"] == "s"
    assert headers["destination"] == "/queue/back"
    assert headers["message-id"] == out.message_id
    assert headers["priority"] == "2"
    assert headers["correlation-id"] == "c-2"
    assert headers["reply-to"] == "/topic/news"
    assert headers["size"] == "3" and headers["fragile"] == "true"
    assert headers["jmsstore.property-types"] == "size:long,fragile:boolean"  # the strings' JMS types
    assert headers["path"] == "x:y\nz"
    assert headers["redelivered"] == "false"
    assert "persistent" not in headers


def test_a_message_the_native_writer_declines_goes_out_as_the_python_mapping_writes_it(
    client: Callable[..., Client], jms: JMSServer
) -> None:
    """MESSAGE frames are written natively from the stored message, except
    for a fetch holding a message with a ``double`` property (Java's and
    Python's spellings of a double differ from Rust's), which the Python
    mapping writes: both kinds, delivered in one fetch, arrive whole."""
    jms.create_queue("mixed")
    with jms.connection_factory().create_connection() as connection:
        producer = connection.create_session().create_producer(Queue("mixed"))
        plain = TextMessage("plain")
        plain.set_property("n", 1)
        priced = TextMessage("priced")
        priced.set_property("price", 1e16)
        priced.set_property("n", 2)
        for message in (plain, priced, plain):
            producer.send(message)
    conn, collector = client()
    conn.subscribe("/queue/mixed", id="s", ack="client-individual")
    frames = collector.wait_messages(3)
    assert [f.body for f in frames] == [b"plain", b"priced", b"plain"]
    assert frames[0].headers["jmsstore.property-types"] == "n:long"
    assert frames[1].headers["price"] == "1e+16"
    assert frames[1].headers["jmsstore.property-types"] == "price:double,n:long"
    assert [f.headers["content-type"] for f in frames] == ["text/plain;charset=utf-8"] * 3
    assert len({f.headers["ack"] for f in frames}) == 3


def test_a_send_can_type_its_properties(client: Callable[..., Client], jms: JMSServer) -> None:
    """``jmsstore.property-types`` makes the properties it names long, double
    or boolean; one it cannot read gets an ERROR naming the property, and
    nothing is sent."""
    conn, collector = client()
    typed = {
        "n": "-42",
        "ratio": "1.5e3",
        "ok": "false",
        "label": "7",
        "jmsstore.property-types": "n:long,ratio:double,ok:boolean",
    }
    conn.send("/queue/typed", b"x", receipt="r", headers=typed)
    collector.wait_receipt("r")
    for bad in ("n:long,ratio:integer", "n:long,missing:long", "ratio:long", "n:double,ok:boolean,label"):
        other, errors = client()
        other.send("/queue/typed", b"bad", headers={**typed, "jmsstore.property-types": bad})
        errors.wait(lambda errors=errors: bool(errors.errors))
        assert errors.errors[0].headers["message"].startswith("header jmsstore.property-types: ")
    with jms.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(Queue("typed"))
        message = consumer.receive(WAIT)
        assert message is not None
        assert message.properties == {"n": -42, "ratio": 1500.0, "ok": False, "label": "7"}
        assert consumer.receive(0.2) is None  # the refused sends sent nothing


def test_topics_deliver_to_every_subscriber(client: Callable[..., Client]) -> None:
    a, got_a = client()
    b, got_b = client()
    a.subscribe("/topic/news", id="a", receipt="sa")
    b.subscribe("/topic/news", id="b", receipt="sb")
    got_a.wait_receipt("sa")
    got_b.wait_receipt("sb")
    a.send("/topic/news", b"extra")
    assert got_a.wait_messages(1)[0].body == b"extra"
    assert got_b.wait_messages(1)[0].headers["destination"] == "/topic/news"


def test_without_auto_create_an_unknown_destination_is_an_error(
    make_stomp: Callable[..., StompServer], client: Callable[..., Client], jms: JMSServer
) -> None:
    served = make_stomp(auto_create=False)
    jms.create_queue("known")
    conn, collector = client(served)
    conn.send("/queue/known", b"ok", receipt="r")
    collector.wait_receipt("r")
    conn.send("/queue/unknown", b"no")
    collector.wait(lambda: bool(collector.errors))
    assert "does not exist" in collector.errors[0].headers["message"]
    assert Queue("unknown") not in jms.destinations()


def test_a_selector_filters_what_a_subscription_receives(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.subscribe("/queue/sel", id="s", headers={"selector": "color = 'red' AND JMSPriority > 3"})
    conn.send("/queue/sel", b"blue", color="blue")
    conn.send("/queue/sel", b"red-low", color="red", priority="1")
    conn.send("/queue/sel", b"red", color="red", receipt="r")
    collector.wait_receipt("r")
    assert collector.wait_messages(1)[0].body == b"red"
    time.sleep(0.3)
    assert len(collector.messages) == 1


def test_an_invalid_selector_is_an_error(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.subscribe("/queue/sel", id="s", headers={"selector": "color = = 'red'"})
    collector.wait(lambda: bool(collector.errors))


# ---------------------------------------------------------------- acknowledgement


def _send_numbered(conn: stomp.Connection12, collector: Collector, destination: str, count: int) -> None:
    for i in range(count):
        conn.send(destination, f"m{i}".encode(), persistent="true", receipt=f"n{i}")
    collector.wait_receipt(f"n{count - 1}")


def _bodies(frames: list[Any]) -> list[bytes]:
    return [f.body for f in frames]


def test_auto_ack_messages_do_not_come_back(client: Callable[..., Client], jms: JMSServer) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/auto", 3)
    conn.subscribe("/queue/auto", id="s", ack="auto")
    assert _bodies(collector.wait_messages(3)) == [b"m0", b"m1", b"m2"]
    disconnect(conn, collector)
    assert jms.message_count(Queue("auto")) == 0


def test_client_ack_is_cumulative(client: Callable[..., Client]) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/cumulative", 3)
    conn.subscribe("/queue/cumulative", id="s", ack="client")
    frames = collector.wait_messages(3)
    conn.ack(frames[1].headers["ack"], receipt="acked")  # the first two
    collector.wait_receipt("acked")
    disconnect(conn, collector)
    again, collector2 = client()
    again.subscribe("/queue/cumulative", id="s", ack="client")
    (back,) = collector2.wait_messages(1)
    assert back.body == b"m2"
    assert back.headers["redelivered"] == "true"
    time.sleep(0.3)
    assert len(collector2.messages) == 1


def test_client_individual_ack_settles_one_message(client: Callable[..., Client]) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/individual", 3)
    conn.subscribe("/queue/individual", id="s", ack="client-individual")
    frames = collector.wait_messages(3)
    conn.ack(frames[0].headers["ack"])
    conn.ack(frames[2].headers["ack"], receipt="acked")
    collector.wait_receipt("acked")
    disconnect(conn, collector)
    again, collector2 = client()
    again.subscribe("/queue/individual", id="s", ack="client-individual")
    assert _bodies(collector2.wait_messages(1)) == [b"m1"]
    time.sleep(0.3)
    assert len(collector2.messages) == 1


def test_nack_redelivers_flagged_redelivered(client: Callable[..., Client]) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/nack", 1)
    conn.subscribe("/queue/nack", id="s", ack="client-individual")
    first = collector.wait_messages(1)[0]
    assert first.headers["redelivered"] == "false"
    conn.nack(first.headers["ack"])
    second = collector.wait_messages(2)[1]
    assert second.headers["message-id"] == first.headers["message-id"]
    assert second.headers["redelivered"] == "true"
    assert second.headers["ack"] != first.headers["ack"]


@pytest.mark.parametrize("unseen", [False, True])
def test_unsubscribe_returns_the_unacknowledged_flagged_unless_the_client_says_it_never_had_them(
    client: Callable[..., Client], jms: JMSServer, unseen: bool
) -> None:
    """jmsstore's client marks UNSUBSCRIBE ``jmsstore.unseen:true`` once its
    application has settled all it was given: what is still unacknowledged was
    in its buffer or on the wire, and comes back as never delivered."""
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/unseen", 3)
    conn.subscribe("/queue/unseen", id="s", ack="client-individual")
    first = collector.wait_messages(3)
    assert [f.headers["redelivered"] for f in first] == ["false"] * 3
    headers = {"jmsstore.unseen": "true"} if unseen else {}
    conn.unsubscribe("s", headers={**headers, "receipt": "gone"})
    collector.wait_receipt("gone")
    conn.subscribe("/queue/unseen", id="t", ack="client-individual")
    again = collector.wait_messages(6)[3:]
    assert _bodies(again) == [b"m0", b"m1", b"m2"]
    assert [f.headers["redelivered"] for f in again] == [str(not unseen).lower()] * 3
    disconnect(conn, collector)
    with jms.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(Queue("unseen"))
        back = [consumer.receive(WAIT) for _ in range(3)]
        # Delivered twice over STOMP: counted once when the first was never seen.
        assert [m.delivery_count for m in back if m is not None] == [3 - unseen] * 3


def _connected_after_sending(r: RawClient, destination: str, count: int) -> RawClient:
    """``r`` connected, having sent m0, m1, ... to ``destination``, each with its receipt back."""
    assert r.connect().command == "CONNECTED"
    for n in range(count):
        r.send(f"SEND\ndestination:{destination}\nreceipt:s{n}\n\nm{n}\x00".encode())
    assert [r.next_frame().header("receipt-id") for _ in range(count)] == [f"s{n}" for n in range(count)]
    return r


def test_a_recall_takes_back_what_is_on_the_wire_and_sends_it_again_in_order(
    raw: Callable[..., RawClient], jms: JMSServer
) -> None:
    """jmsstore's client recovers by NACKing what its application had, the
    last NACK marked ``jmsstore.recall:true``: the server takes back every
    other message in flight as never delivered and marks the MESSAGE frames
    after it ``jmsstore.recall:1``, so that the client can drop those that
    were on the wire; the marked ones are the destination's messages again,
    in order, the recovered one first and flagged."""
    r = _connected_after_sending(raw(), "/queue/recall", 4)
    r.send(b"SUBSCRIBE\ndestination:/queue/recall\nid:s\nack:client-individual\n\n\x00")
    first = r.next_frame()
    assert (first.command, first.body, first.header("jmsstore.recall")) == ("MESSAGE", b"m0", None)
    # Sent before the client reads further: the other frames are still on the wire (or not yet sent).
    r.send(f"NACK\nid:{first.header('ack')}\njmsstore.recall:true\nreceipt:back\n\n\x00".encode())
    stale, again, receipts = [], [], []
    while len(again) < 4 or not receipts:
        frame = r.next_frame()
        if frame.command == "RECEIPT":
            receipts.append(frame.header("receipt-id"))
        elif frame.header("jmsstore.recall") == "1":
            again.append(frame)
        else:
            assert frame.header("jmsstore.recall") is None
            assert not again, "every frame sent after the recall is marked"
            stale.append(frame)
    assert receipts == ["back"]
    assert [f.body for f in again] == [b"m0", b"m1", b"m2", b"m3"]
    assert [f.header("redelivered") for f in again] == ["true", "false", "false", "false"]
    assert len(stale) <= 4
    for f in again:
        r.send(f"ACK\nid:{f.header('ack')}\n\n\x00".encode())
    taken_back = stale[-1] if stale else first  # first: settled by its NACK
    r.send(f"ACK\nid:{taken_back.header('ack')}\nreceipt:old\n\n\x00".encode())
    # The taken-back frames' ack ids are no longer the client's to use.
    assert r.next_frame().command == "ERROR"
    assert jms.message_count(Queue("recall")) == 0


def test_a_fetch_that_a_recall_overtakes_goes_back_instead_of_out(
    raw: Callable[..., RawClient],
    make_stomp: Callable[..., StompServer],
    jms: JMSServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message the dispatcher fetched before a recall and would write
    after it must not go out: unmarked, the client would take it for one
    sent before the recall and drop it, and sent ahead of the recovered
    message it would overtake it. It goes back, never delivered, and comes
    again marked, after the recovered one. The dispatcher (Python's: the
    broker core's makes the same check, ``InFlight::admit``, tested in
    Rust) is held between its fetch and its write while the recall is
    served."""
    acked = threading.Event()
    fetched = threading.Event()
    go_on = threading.Event()
    deliver = Subscription._deliver
    calls = 0

    def held_after_the_ack(self: Subscription, deliveries: list[Any], recalls: int) -> None:
        nonlocal calls
        calls += 1
        # m0 and m1 go out before the ACK (in one fetch or two): the first fetch after it is m2's.
        if acked.is_set() and not fetched.is_set():
            fetched.set()
            assert go_on.wait(WAIT), "the test did not let the dispatcher go on"
        deliver(self, deliveries, recalls)

    monkeypatch.setattr(Subscription, "_deliver", held_after_the_ack)
    r = _connected_after_sending(raw(make_stomp(native_dispatch=False)), "/queue/overtaken", 4)
    r.send(b"SUBSCRIBE\ndestination:/queue/overtaken\nid:s\nack:client-individual\nactivemq.prefetchSize:2\n\n\x00")
    m0, m1 = r.next_frame(), r.next_frame()
    assert [m0.body, m1.body] == [b"m0", b"m1"]
    acked.set()
    r.send(f"ACK\nid:{m1.header('ack')}\n\n\x00".encode())  # room for one more: the dispatcher fetches m2
    assert fetched.wait(WAIT), "the dispatcher did not fetch again"
    r.send(f"NACK\nid:{m0.header('ack')}\njmsstore.recall:true\nreceipt:back\n\n\x00".encode())
    receipt = r.next_frame()
    assert (receipt.command, receipt.header("receipt-id")) == ("RECEIPT", "back")
    go_on.set()  # the fetch of m2, made before the recall, now reaches its write
    again = [r.next_frame() for _ in range(2)]
    assert [(f.body, f.header("redelivered"), f.header("jmsstore.recall")) for f in again] == [
        (b"m0", "true", "1"),
        (b"m2", "false", "1"),
    ]
    for f in again:
        r.send(f"ACK\nid:{f.header('ack')}\n\n\x00".encode())
    last = r.next_frame()
    assert (last.body, last.header("redelivered"), last.header("jmsstore.recall")) == (b"m3", "false", "1")
    r.send(f"ACK\nid:{last.header('ack')}\nreceipt:done\n\n\x00".encode())
    assert r.next_frame().header("receipt-id") == "done"
    assert jms.message_count(Queue("overtaken")) == 0
    assert calls >= 3


def test_an_unsubscribed_dispatcher_is_no_longer_counted_busy(raw: Callable[..., RawClient], jms: JMSServer) -> None:
    """A dispatcher that delivered a message is counted busy with it until it looks again
    (a send with nothing ahead then writes the next message's delivery record); once its
    subscription ended it takes nothing more, and the destination's bell keeps nothing of
    it, here when it ended with no room for more (prefetch 1, m0 unacknowledged)."""
    r = _connected_after_sending(raw(), "/queue/ended", 1)
    r.send(b"SUBSCRIBE\ndestination:/queue/ended\nid:s\nack:client-individual\nactivemq.prefetchSize:1\n\n\x00")
    assert r.next_frame().body == b"m0"
    bell = jms.registry.queues["ended"].target.bell
    r.send(b"UNSUBSCRIBE\nid:s\nreceipt:gone\n\n\x00")
    assert r.next_frame().header("receipt-id") == "gone"
    assert (bell.busy, bell.waiting()) == (0, (0, 0))


def test_a_recall_in_a_transaction_is_an_error(raw: Callable[..., RawClient], jms: JMSServer) -> None:
    r = raw()
    assert r.connect().command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/recall-tx\nreceipt:s\n\nm\x00")
    assert r.next_frame().header("receipt-id") == "s"
    r.send(b"SUBSCRIBE\ndestination:/queue/recall-tx\nid:s\nack:client-individual\n\n\x00")
    message = r.next_frame()
    r.send(b"BEGIN\ntransaction:t\n\n\x00")
    r.send(f"NACK\nid:{message.header('ack')}\ntransaction:t\njmsstore.recall:true\n\n\x00".encode())
    error = r.next_frame()
    assert error.command == "ERROR"
    assert "jmsstore.recall" in (error.header("message") or "")
    assert r.closed_by_server()
    assert jms.message_count(Queue("recall-tx")) == 1  # back, as a closed connection returns it


def test_an_ack_for_no_message_in_flight_is_an_error(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.ack("1.999")
    collector.wait(lambda: bool(collector.errors))
    assert "1.999" in collector.errors[0].headers["message"]


def test_prefetch_bounds_the_unacknowledged_messages_in_flight(client: Callable[..., Client]) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/prefetch", 5)
    conn.subscribe("/queue/prefetch", id="s", ack="client-individual", headers={"activemq.prefetchSize": "2"})
    frames = collector.wait_messages(2)
    time.sleep(0.3)
    assert len(collector.messages) == 2
    conn.ack(frames[0].headers["ack"])
    assert _bodies(collector.wait_messages(3)) == [b"m0", b"m1", b"m2"]
    time.sleep(0.3)
    assert len(collector.messages) == 3


def test_unsubscribe_returns_unacknowledged_messages(client: Callable[..., Client], jms: JMSServer) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/unsub", 2)
    conn.subscribe("/queue/unsub", id="s", ack="client")
    collector.wait_messages(2)
    conn.unsubscribe("s", receipt="u")
    collector.wait_receipt("u")
    assert jms.message_count(Queue("unsub")) == 2


# ---------------------------------------------------------------- transactions


def test_a_committed_transaction_applies_its_sends_and_acks_at_once(
    client: Callable[..., Client], jms: JMSServer
) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/tx-in", 1)
    conn.subscribe("/queue/tx-in", id="s", ack="client-individual")
    incoming = collector.wait_messages(1)[0]
    tx = conn.begin()
    conn.send("/queue/tx-out", b"a", transaction=tx, persistent="true")
    conn.send("/queue/tx-out", b"b", transaction=tx, persistent="true")
    conn.ack(incoming.headers["ack"], transaction=tx, receipt="acked")
    collector.wait_receipt("acked")
    assert jms.message_count(Queue("tx-out")) == 0
    assert jms.message_count(Queue("tx-in")) == 1
    conn.commit(tx, receipt="committed")
    collector.wait_receipt("committed")
    assert jms.message_count(Queue("tx-out")) == 2
    assert jms.message_count(Queue("tx-in")) == 0


def test_an_aborted_transaction_leaves_nothing_visible(client: Callable[..., Client], jms: JMSServer) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/abort-in", 1)
    conn.subscribe("/queue/abort-in", id="s", ack="client-individual")
    conn.subscribe("/queue/abort-out", id="watch")
    incoming = collector.wait_messages(1)[0]
    tx = conn.begin()
    conn.send("/queue/abort-out", b"never", transaction=tx)
    conn.ack(incoming.headers["ack"], transaction=tx)
    conn.abort(tx, receipt="aborted")
    collector.wait_receipt("aborted")
    # The aborted acknowledgement redelivers the message; the send never happened.
    redelivered = collector.wait_messages(2)[1]
    assert redelivered.headers["redelivered"] == "true"
    time.sleep(0.3)
    assert [f.headers["subscription"] for f in collector.messages] == ["s", "s"]
    assert jms.message_count(Queue("abort-out")) == 0


def test_commit_of_an_unknown_transaction_is_an_error(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.commit("nope")
    collector.wait(lambda: bool(collector.errors))
    # STOMP 1.2: the server closes the connection after it sends an ERROR frame.
    collector.wait(lambda: collector.disconnected)


# ---------------------------------------------------------------- durable subscriptions


def test_a_durable_subscription_collects_while_its_client_is_away(client: Callable[..., Client]) -> None:
    subscriber, collector = client(**{"client-id": "reader"})
    subscriber.subscribe(
        "/topic/events", id="d", ack="client-individual", headers={"activemq.subscriptionName": "audit"}, receipt="s"
    )
    collector.wait_receipt("s")
    disconnect(subscriber, collector)
    publisher, published = client()
    _send_numbered(publisher, published, "/topic/events", 2)
    back, collector2 = client(**{"client-id": "reader"})
    back.subscribe("/topic/events", id="d", ack="client-individual", headers={"activemq.subscriptionName": "audit"})
    assert _bodies(collector2.wait_messages(2)) == [b"m0", b"m1"]


def test_a_durable_subscription_needs_a_client_id(client: Callable[..., Client]) -> None:
    conn, collector = client()
    conn.subscribe("/topic/events", id="d", headers={"activemq.subscriptionName": "audit"})
    collector.wait(lambda: bool(collector.errors))
    assert "client-id" in collector.errors[0].headers["message"]


def test_unsubscribe_with_the_subscription_name_deletes_the_durable_subscription(
    client: Callable[..., Client], jms: JMSServer
) -> None:
    conn, collector = client(**{"client-id": "reader"})
    conn.subscribe("/topic/t", id="d", headers={"activemq.subscriptionName": "gone"}, receipt="s")
    collector.wait_receipt("s")
    assert [s["name"] for s in jms.durable_subscriptions()] == ["gone"]
    conn.unsubscribe("d", headers={"activemq.subscriptionName": "gone"}, receipt="u")
    collector.wait_receipt("u")
    assert jms.durable_subscriptions() == []


# ---------------------------------------------------------------- statistics and shutdown


def test_statistics_count_connections_frames_and_subscriptions(
    served: StompServer, client: Callable[..., Client]
) -> None:
    conn, collector = client()
    conn.subscribe("/queue/stats", id="s")
    conn.send("/queue/stats", b"x", receipt="r")
    collector.wait_messages(1)
    collector.wait_receipt("r")
    # Counted once written: the client may see the frame a moment before.
    eventually(
        lambda: (
            served.statistics()["frames_out"].get("MESSAGE") == served.statistics()["frames_out"].get("RECEIPT") == 1
        )
    )
    stats = served.statistics()
    assert stats["connections_open"] == 1 and stats["connections_total"] == 1
    assert stats["subscriptions"] == 1
    assert stats["frames_in"]["SEND"] == 1 and stats["frames_in"]["SUBSCRIBE"] == 1
    assert stats["frames_out"]["MESSAGE"] == 1 and stats["frames_out"]["RECEIPT"] == 1
    disconnect(conn, collector)
    eventually(lambda: served.statistics()["connections_open"] == 0)
    # A closed connection's frames stay counted (once), and a new one's add to them.
    closed = served.statistics()
    assert closed["frames_in"]["SEND"] == 1 and closed["frames_in"]["DISCONNECT"] == 1
    assert closed["frames_out"]["MESSAGE"] == 1 and closed["frames_out"]["CONNECTED"] == 1
    again, collector = client()
    again.send("/queue/stats", b"y", receipt="r2")
    collector.wait_receipt("r2")
    eventually(lambda: served.statistics()["frames_in"]["SEND"] == 2)
    stats = served.statistics()
    assert stats["frames_in"].get("CONNECT", 0) + stats["frames_in"].get("STOMP", 0) == 2
    assert stats["frames_out"]["CONNECTED"] == 2 and stats["frames_out"]["MESSAGE"] == 1
    disconnect(again, collector)


def test_closing_the_server_returns_unacknowledged_messages(
    served: StompServer, client: Callable[..., Client], jms: JMSServer
) -> None:
    conn, collector = client()
    _send_numbered(conn, collector, "/queue/shutdown", 2)
    conn.subscribe("/queue/shutdown", id="s", ack="client")
    collector.wait_messages(2)
    served.close()
    collector.wait(lambda: collector.disconnected)
    with jms.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(Queue("shutdown"))
        back = [consumer.receive(WAIT) for _ in range(2)]
    assert [m.redelivered for m in back if m is not None] == [True, True]


# ---------------------------------------------------------------- JMSServer.listen


def test_a_jms_server_listens_and_closes_its_endpoint_with_itself(home: Path) -> None:
    """``server.listen(host, port)`` serves STOMP as ``jmsstore serve`` does;
    the server closes its endpoints first when it closes."""
    jms = JMSServer(home)
    try:
        endpoint = jms.listen("127.0.0.1", 0)
        assert isinstance(endpoint, StompServer)
        host, port = endpoint.address
        assert host == "127.0.0.1" and port > 0
        conn = stomp.Connection12([endpoint.address], auto_decode=False, timeout=WAIT)
        collector = Collector()
        conn.set_listener("collector", collector)
        conn.connect(wait=True)
        conn.send("/queue/listened", b"hello", receipt="r1")
        collector.wait_receipt("r1")
        with jms.connection_factory().create_connection() as connection:
            connection.start()
            message = connection.create_session().create_consumer(Queue("listened")).receive(WAIT)
            assert isinstance(message, BytesMessage) and message.body == b"hello"
    finally:
        jms.close()
    collector.wait(lambda: collector.disconnected)  # closed with the server
    with pytest.raises(OSError):
        socket.create_connection((host, port), timeout=1.0).close()  # nothing listens there any more


def test_listen_refuses_what_it_cannot_serve_and_opens_nothing(home: Path) -> None:
    jms = JMSServer(home)
    try:
        with pytest.raises(InvalidArgumentError, match="'stomp'"):
            jms.listen("127.0.0.1", 0, protocol="amqp")  # names the protocols there are
        with pytest.raises(TypeError):
            jms.listen("127.0.0.1", 0, no_such_option=True)
        assert jms.statistics()["sent"] == 0
    finally:
        jms.close()
    with pytest.raises(IllegalStateError):
        jms.listen("127.0.0.1", 0)
