"""The three STOMP servers of the stomp suite (``python -m bench stomp``),
each a :class:`~jmsstore.bench.peers.servers.Server` started for the run
on 127.0.0.1 from scratch directories and stopped at its end, and the one
stomp.py client the suite drives all three with.

- :class:`JmsstoreServe`: ``jmsstore serve DIR --listen 127.0.0.1:<free
  port>`` as a child process (this interpreter, ``-m jmsstore``), over a
  bare server directory: destinations are created on first use, as
  ActiveMQ does.
- :class:`RabbitMQStomp`: the RabbitMQ node of :mod:`bench.peers.rabbitmq`
  with the ``rabbitmq_stomp`` plugin enabled in its scratch
  ``enabled_plugins`` file and one STOMP listener,
  ``stomp.listeners.tcp.1 = 127.0.0.1:<free port>``; STOMP logins default
  to ``guest`` (``stomp.default_user``), which may connect over loopback.
- ActiveMQ Classic: :class:`bench.peers.activemq.ActiveMQ` as it is (its
  only transport connector is STOMP on a free loopback port).

The server's CPU time is that of the one process that does the broker's
work, read from ``/proc/<pid>/stat`` (utime + stime, all its threads):
the ``jmsstore serve`` Python process, RabbitMQ's ``beam.smp`` (not epmd
nor the port helpers), ActiveMQ's ``java``.

The client (:class:`StompClient`): stomp.py's ``Connection12`` (STOMP
1.2), one connection per producer and per consumer thread, the same
frames to every server. A run uses a fresh ``/queue/NAME``. Consumers
subscribe with ``ack: client-individual`` and a prefetch of 128 (both the
ActiveMQ header ``activemq.prefetchSize``, which jmsstore follows too, and
RabbitMQ's ``prefetch-count``) and ACK every message. Modes:

- ``persistent``: ``persistent: true`` and a ``receipt`` on every SEND,
  waited for before the next (each server answers once the message is
  safe: jmsstore once it is fsynced, ActiveMQ once KahaDB has it,
  RabbitMQ once it would confirm it);
- ``non-persistent``: no ``persistent`` header (non-persistent is the
  default of all three), no receipts; the producer's DISCONNECT waits for
  a receipt, so everything it sent has arrived. (``persistent: false``
  would be the same to jmsstore and ActiveMQ, but RabbitMQ takes the
  header as the queue's durability too and refuses it on the durable queue
  the consumers declared, with ``resource_locked``.)
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import activemq, rabbitmq
from jmsstore.bench.peers.servers import CLOCK_TICKS, Client, Close, Receive, Send, Server, free_port, session_pids

try:
    import stomp
except ImportError as e:  # pragma: no cover - in the bench extras
    stomp = None
    IMPORT_ERROR: str | None = f"stomp.py is not installed ({e}; pip install stomp.py)"
else:
    IMPORT_ERROR = None

PREFETCH = 128
LOGIN = ("guest", "guest")  # RabbitMQ's default user; jmsstore and ActiveMQ without users ignore it
MODES = {
    "persistent": "persistent:true, a receipt per SEND (waited for)",
    "non-persistent": "no persistent header (the default), no receipts (DISCONNECT with a receipt at the end)",
}
_names = itertools.count(1)


def client_version() -> str | None:
    """stomp.py's version (None: not installed)."""
    return getattr(stomp, "__version__", None)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), 0 if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def find_process(sessions: list[int], command: str) -> int | None:
    """The pid of the process named ``command`` (its ``comm``) in ``sessions``."""
    for pid in sorted(session_pids(sessions)):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == command:
                return pid
        except OSError:
            continue
    return None


class _ServerProcess:
    """Mixin: CPU time of the one process that does the broker's work (``COMMAND``)."""

    COMMAND = ""

    def server_pid(self) -> int | None:
        return find_process(self.sessions(), self.COMMAND)  # type: ignore[attr-defined]

    def cpu_seconds(self) -> float:
        pid = self.server_pid()
        return process_cpu_seconds(pid) if pid is not None else 0.0


def stomp_connect(port: int, listener: Any = None) -> Any:
    """A stomp.py STOMP 1.2 connection to 127.0.0.1:``port``, connected."""
    assert stomp is not None
    conn = stomp.Connection12(
        [("127.0.0.1", port)], vhost="/", auto_decode=False, heartbeats=(0, 0), reconnect_attempts_max=1
    )
    if listener is not None:
        conn.set_listener("bench", listener)
    conn.connect(LOGIN[0], LOGIN[1], wait=True)
    return conn


class JmsstoreServe(_ServerProcess, Server):
    """``jmsstore serve`` over a fresh server directory, on a free loopback port."""

    name = "jmsstore"
    COMMAND = "python"

    def __init__(self, root: Path, log: Any = lambda _: None, options: tuple[str, ...] = ()) -> None:
        super().__init__(root, log)
        self.ports = {"stomp": free_port()}
        self.options = options
        (root / "log").mkdir(parents=True, exist_ok=True)

    def processes(self) -> list[tuple[str, list[str], dict[str, str], int]]:
        argv = [
            sys.executable,
            "-m",
            "jmsstore",
            "serve",
            str(self.root / "home"),
            "--listen",
            f"127.0.0.1:{self.ports['stomp']}",
            *self.options,
        ]
        return [("serve", argv, dict(os.environ), self.ports["stomp"])]

    def server_pid(self) -> int | None:
        return self.procs[0][1].pid if self.procs else None

    def log_file(self) -> Path:
        return self.root / "log" / "serve.out"

    def ready(self) -> None:
        stomp_connect(self.ports["stomp"]).disconnect()

    def version(self) -> str | None:
        import jmsstore

        return str(getattr(jmsstore, "__version__", "checkout"))

    def settings(self) -> dict[str, Any]:
        return {
            "version": self.version(),
            "ports": self.ports,
            "bound_to": "127.0.0.1",
            "command": "jmsstore serve HOME --listen 127.0.0.1:PORT " + " ".join(self.options),
            "store": "the JMS server's default: direct-write (fsync before a persistent SEND's receipt)",
        }


class RabbitMQStomp(_ServerProcess, rabbitmq.RabbitMQ):
    """The RabbitMQ node of :class:`bench.peers.rabbitmq.RabbitMQ` with its STOMP plugin on a loopback port."""

    COMMAND = "beam.smp"

    def __init__(self, root: Path, log: Any = lambda _: None) -> None:
        super().__init__(root, log)
        self.ports["stomp"] = free_port()
        (root / "enabled_plugins").write_text("[rabbitmq_stomp].\n")
        with open(root / "rabbitmq.conf", "a") as conf:
            conf.write(
                f"stomp.listeners.tcp.1 = 127.0.0.1:{self.ports['stomp']}\n"
                f"stomp.default_user = {LOGIN[0]}\nstomp.default_pass = {LOGIN[1]}\n"
            )

    def ready(self) -> None:
        stomp_connect(self.ports["stomp"]).disconnect()

    def settings(self) -> dict[str, Any]:
        s = super().settings()
        s.update(
            bound_to="127.0.0.1 (AMQP, STOMP, distribution, epmd)",
            plugins=["rabbitmq_stomp"],
            queue="/queue/NAME: RabbitMQ's STOMP default, a durable classic queue",
            client=f"stomp.py {getattr(stomp, '__version__', None)}, STOMP 1.2",
        )
        return s


class ActiveMQStomp(_ServerProcess, activemq.ActiveMQ):
    """ActiveMQ Classic as :class:`bench.peers.activemq.ActiveMQ` starts it (STOMP on a loopback port)."""

    COMMAND = "java"

    def settings(self) -> dict[str, Any]:
        s = super().settings()
        s["client"] = f"stomp.py {getattr(stomp, '__version__', None)}, STOMP 1.2"
        return s


class StompClient(Client):
    """One run against any of the three servers: a fresh queue, producers and
    consumers each on its own stomp.py connection (the module documentation
    lists the frames)."""

    def __init__(self, server: Server, mode: str, body: bytes) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        super().__init__(server, mode, body)
        self.port = server.ports["stomp"]
        self.destination = f"/queue/stomp-bench-{os.getpid()}-{next(_names)}"
        self.headers = {} if mode == "non-persistent" else {"persistent": "true"}
        self.errors: list[str] = []

    def producer(self) -> tuple[Send, Close]:
        listener = activemq.StompListener(self.server.name)
        try:
            conn = stomp_connect(self.port, listener)
        except BaseException as e:
            self._setup_failed(e)
            raise
        destination, headers, body = self.destination, self.headers, self.body
        ids = itertools.count(1)
        persistent = self.mode == "persistent"

        def send() -> None:
            if persistent:
                receipt = f"r{next(ids)}"
                conn.send(destination, body, headers={**headers, "receipt": receipt})
                listener.wait(receipt)
            else:
                conn.send(destination, body, headers=headers)
                listener.raise_error()

        def finish() -> None:
            conn.disconnect(receipt=f"d{next(ids)}")  # waits: everything sent has arrived
            listener.raise_error()

        self._joined()
        return send, finish

    def consumer(self) -> tuple[Receive, Close]:
        listener = activemq.StompListener(self.server.name)
        try:
            conn = stomp_connect(self.port, listener)
            conn.subscribe(
                self.destination,
                id="1",
                ack="client-individual",
                headers={"activemq.prefetchSize": str(PREFETCH), "prefetch-count": str(PREFETCH)},
            )
        except BaseException as e:
            self._setup_failed(e)
            raise
        messages = listener.messages

        def receive(timeout: float) -> int:
            try:
                frame = messages.get(timeout=timeout)
            except queue.Empty:
                listener.raise_error()
                return 0
            conn.ack(frame.headers["ack"])
            self.check(frame.body)
            return 1

        def close() -> None:
            try:
                conn.unsubscribe("1")
            finally:
                conn.disconnect(receipt=f"d{next(_names)}")

        self._joined()
        return receive, close

    def remaining(self) -> int:
        """Receive (and ACK) whatever is left on the queue within a short quiet time: the count."""
        listener = activemq.StompListener(self.server.name)
        conn = stomp_connect(self.port, listener)
        n = 0
        try:
            conn.subscribe(self.destination, id="1", ack="client-individual")
            while True:
                try:
                    frame = listener.messages.get(timeout=0.3)
                except queue.Empty:
                    break
                conn.ack(frame.headers["ack"])
                n += 1
        finally:
            conn.disconnect(receipt=f"d{next(_names)}")
        return n
