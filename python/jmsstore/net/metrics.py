"""Statistics as Prometheus text (the exposition format Prometheus and
OpenMetrics scrapers read) over HTTP: ``GET /metrics`` on the address
given to ``jmsstore serve --metrics HOST:PORT``.

Every number of the JMS server's :meth:`~jmsstore.JMSServer.statistics`
becomes a gauge named after its place (``jmsstore_sent``,
``jmsstore_store_fsyncs``, ``jmsstore_queue_messages_current{queue="orders"}``),
labelled with the server's name; every number of each STOMP endpoint's
statistics a ``jmsstore_stomp_...`` gauge labelled with its address
(frames by command as ``jmsstore_stomp_frames_in{command="SEND"}``).
Booleans are 0 or 1; text and lists are left out.

The endpoint answers one request at a time, each within 5 seconds from
its connection (reading the request and writing the answer), so a scraper
that stalls or trickles its request cannot tie up threads of the server,
nor hold up the next scrape for longer than that.
"""

from __future__ import annotations

import io
import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

__all__ = ["CONTENT_TYPE", "MetricsServer", "render"]

log = logging.getLogger("jmsstore.net.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Tables of named things in the server's statistics, and the label each gets.
_NAMED = {"queues": "queue", "topics": "topic", "quotas": "quota"}

Sample = tuple[str, dict[str, str], float]


def _name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _samples(prefix: str, data: Mapping[str, Any], labels: dict[str, str]) -> Iterable[Sample]:
    for key, value in data.items():
        number = _number(value)
        if number is not None:
            yield f"{prefix}_{_name(key)}", labels, number
        elif isinstance(value, Mapping) and key in _NAMED:
            for item, table in value.items():
                if isinstance(table, Mapping):
                    yield from _samples(f"{prefix}_{_NAMED[key]}", table, {**labels, _NAMED[key]: str(item)})
        elif isinstance(value, Mapping) and key in ("frames_in", "frames_out"):
            for command, count in value.items():
                yield f"{prefix}_{key}", {**labels, "command": str(command)}, float(count)
        elif isinstance(value, Mapping):
            yield from _samples(f"{prefix}_{_name(key)}", value, labels)
        elif isinstance(value, list) and key == "durable_subscriptions":
            for entry in value:
                if isinstance(entry, Mapping):
                    named = {k: str(v) for k, v in entry.items() if isinstance(v, str)}
                    numbers = {k: v for k, v in entry.items() if _number(v) is not None}
                    yield from _samples(f"{prefix}_durable_subscription", numbers, {**labels, **named})


def render(broker: Mapping[str, Any], endpoints: Mapping[str, Mapping[str, Any]]) -> str:
    """The exposition text of a JMS server's statistics and those of its
    STOMP endpoints (by address)."""
    server = {"server": str(broker.get("name", ""))}
    samples = list(_samples("jmsstore", broker, server))
    for address, stats in endpoints.items():
        samples.extend(_samples("jmsstore_stomp", stats, {**server, "endpoint": address}))
    lines: list[str] = []
    typed: set[str] = set()
    for name, labels, value in sorted(samples, key=lambda s: s[0]):
        if name not in typed:
            typed.add(name)
            lines.append(f"# TYPE {name} gauge")
        text = ",".join(f'{_name(k)}="{_label_value(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {value:g}" if text else f"{name} {value:g}")
    return "\n".join(lines) + "\n"


class _Deadlined(io.RawIOBase):
    """A request's socket, read and written within one deadline for the
    whole request: a per-read timeout alone would let a client that sends a
    byte now and then hold the (one) serving thread for as long as it likes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def _remaining(self) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request was not done in time")
        self._sock.settimeout(remaining)
        return remaining

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._remaining()
        return self._sock.recv_into(buffer)

    def write(self, data: Any) -> int:
        self._remaining()
        self._sock.sendall(data)  # its timeout bounds the whole call
        return len(data)


class _HTTPServer(HTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            # The scraper went away (broken pipe, reset) or was too slow: its loss, not ours.
            log.debug("metrics %s: %s", client_address, error)
            return
        log.exception("metrics %s: answering the request failed", client_address)


class MetricsServer:
    """Serves ``collect()`` (exposition text) at ``GET /metrics`` on
    ``host:port`` (port 0: any free port; read :attr:`address` after
    :meth:`start`). Each request, from its connection to the end of the
    answer, must be done within ``timeout`` seconds, or its connection is
    dropped."""

    def __init__(
        self, collect: Callable[[], str], host: str = "127.0.0.1", port: int = 9464, *, timeout: float = 5.0
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
            raise ValueError(f"timeout must be within 0..3600 seconds, not {timeout!r}")
        self._collect = collect
        self._host = host
        self._port = port
        self._timeout = float(timeout)
        self._http: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        collect = self._collect
        budget = self._timeout

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                self.connection = self.request
                # One deadline for the whole request: a scraper that stalls is dropped.
                stream = _Deadlined(self.connection, time.monotonic() + budget)
                self.rfile = io.BufferedReader(stream)
                self.wfile = io.BufferedWriter(stream)  # flushed after each answer

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "the metrics are at /metrics")
                    return
                try:
                    body = collect().encode("utf-8")
                except Exception:
                    log.exception("metrics: collecting the statistics failed")
                    self.send_error(500, "collecting the statistics failed")
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("metrics %s: " + format, self.address_string(), *args)

        self._http = _HTTPServer((self._host, self._port), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, name="jmsstore-metrics", daemon=True)
        self._thread.start()
        host, port = self.address
        log.info("metrics: serving on http://%s:%d/metrics", host, port)
        return self

    @property
    def address(self) -> tuple[str, int]:
        if self._http is None:
            raise RuntimeError("the metrics server has not started")
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        if self._http is None:
            return
        self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._http = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
