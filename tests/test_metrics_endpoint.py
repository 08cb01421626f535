"""The metrics endpoint's own behaviour (``jmsstore.net.metrics.MetricsServer``):
it answers one request at a time, each within 5 s from its connection, so a
client that trickles its request holds up the next scrape no longer than
that; a scraper that goes away mid-answer is no error worth a traceback.

Loopback only; every wait is bounded."""

from __future__ import annotations

import socket
import struct
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from jmsstore.net.metrics import MetricsServer

BOUND = 15.0  # well past the endpoint's 5 s per request


@pytest.fixture
def metrics() -> Iterator[tuple[MetricsServer, list[int]]]:
    """A started endpoint; append a size to the list to have the next scrape answered that large."""
    sizes: list[int] = []

    def collect() -> str:
        return "x" * sizes.pop(0) + "\n" if sizes else "jmsstore_up 1\n"

    server = MetricsServer(collect, "127.0.0.1", 0).start()
    try:
        yield server, sizes
    finally:
        server.close()


def scrape(server: MetricsServer) -> str:
    host, port = server.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=BOUND) as response:
        return str(response.read().decode("utf-8"))


def test_a_client_trickling_its_request_does_not_hold_up_the_next_scrape(
    metrics: tuple[MetricsServer, list[int]],
) -> None:
    server, _ = metrics
    trickler = socket.create_connection(server.address, timeout=BOUND)
    stop = threading.Event()
    dropped = threading.Event()

    def trickle() -> None:
        # One byte a second, each well within a per-read timeout, for longer than BOUND.
        try:
            for byte in b"GET /metrics HTTP/1.0\r\nX-Slow: " + b"y" * 100:
                trickler.sendall(bytes([byte]))
                if stop.wait(1.0):
                    return
        except OSError:
            dropped.set()

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        assert scrape(server) == "jmsstore_up 1\n"
        # The trickler was cut off: its next bytes find the connection closed.
        trickler.settimeout(BOUND)
        assert trickler.recv(1024) == b""
    finally:
        stop.set()
        thread.join(BOUND)
        trickler.close()


def test_a_scraper_that_goes_away_mid_answer_prints_no_traceback(
    metrics: tuple[MetricsServer, list[int]], capfd: pytest.CaptureFixture[str]
) -> None:
    server, sizes = metrics
    sizes.append(16 * 1024 * 1024)  # more than the socket buffers take: the write meets the reset
    gone = socket.create_connection(server.address, timeout=BOUND)
    gone.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    gone.recv(1)  # the answer has begun
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    gone.close()
    assert scrape(server) == "jmsstore_up 1\n"  # answered after it: the broken one was handled
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
