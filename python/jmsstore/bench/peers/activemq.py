"""ActiveMQ Classic as a peer: Debian's ``activemq`` package started from
scratch directories, driven over STOMP with stomp.py.

The server: the package's ``activemq.jar`` run with the current user's
``java`` (not ``/usr/bin/activemq``, which switches to the ``activemq``
user, and whose ``activemq-options`` overrides ``ACTIVEMQ_BASE``), with
our own ``activemq.xml``: Debian's default configuration has no STOMP
connector, so ours has one transport connector, ``stomp://127.0.0.1:<free
port>``, JMX off, and KahaDB (its default ``enableJournalDiskSyncs``: a
synchronous send is on disk when acknowledged) in
``${activemq.data}/kahadb``. The data, configuration and temporary
directories are given as the system properties ``activemq.data``,
``activemq.conf`` and ``java.io.tmpdir`` (all under the scratch
directory), with a 512 MiB heap. Stopped with SIGTERM (the JVM's
shutdown hook stops the broker), SIGKILL after a grace period.

The client, per run: a fresh queue; one STOMP 1.1 connection per producer
and per consumer thread; consumers subscribe with ``ack:
client-individual`` and ``activemq.prefetchSize: 128`` and ACK every
message. Modes:

- ``persistent``: ``persistent: true`` with a ``receipt`` per SEND,
  waited for (the broker answers once the message is stored);
- ``batched``: ``persistent: true`` in transactions of 100 (BEGIN, 100
  SENDs, COMMIT with a receipt, waited for);
- ``non-persistent``: ``persistent: false``, no receipts (the DISCONNECT
  at the end waits for a receipt, so everything sent has arrived).
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import threading
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import debian
from jmsstore.bench.peers.servers import Client, Close, Receive, Send, Server, free_port

try:
    import stomp
except ImportError as e:  # pragma: no cover - in the bench extras
    stomp = None
    IMPORT_ERROR: str | None = f"stomp.py is not installed ({e}; pip install stomp.py)"
else:
    IMPORT_ERROR = None

HOME = Path("/usr/share/activemq")
JAR = HOME / "bin" / "activemq.jar"
PACKAGES = ("activemq",)
PREFETCH = 128
BATCH = 100
RECEIPT_TIMEOUT = 60.0
HEAP = "512M"
MODES = {
    "persistent": "stomp.py, persistent:true, a receipt per SEND",
    "batched": f"stomp.py, persistent:true, transactions of {BATCH} (receipt on COMMIT)",
    "non-persistent": "stomp.py, persistent:false, no receipts",
}
_names = itertools.count(1)

ACTIVEMQ_XML = """\
<beans xmlns="http://www.springframework.org/schema/beans"
       xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
       xsi:schemaLocation="http://www.springframework.org/schema/beans
         http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
         http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <!-- written by jmsstore's bench (bench/peers/activemq.py) -->
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="jmsstore-bench" useJmx="false"
          dataDirectory="${activemq.data}" schedulerSupport="false" advisorySupport="false">
    <persistenceAdapter>
      <kahaDB directory="${activemq.data}/kahadb"/>
    </persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:PORT"/>
    </transportConnectors>
  </broker>
</beans>
"""

LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=LOG
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=%d %-5p [%t] %c - %m%n
"""


def missing() -> str | None:
    """Why this peer cannot run here (None: it can)."""
    if IMPORT_ERROR is not None:
        return IMPORT_ERROR
    if not JAR.exists():
        return f"ActiveMQ is not installed ({JAR} missing; Debian package activemq)"
    if shutil.which("java") is None:
        return "java is not on PATH"
    return None


class ActiveMQ(Server):
    """An ActiveMQ Classic broker under ``root`` with one STOMP connector on loopback."""

    name = "activemq"
    packages = PACKAGES

    def __init__(self, root: Path, log: Any = lambda _: None) -> None:
        super().__init__(root, log)
        self.ports = {"stomp": free_port()}
        for d in ("conf", "data", "tmp", "log"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "conf" / "activemq.xml").write_text(ACTIVEMQ_XML.replace("PORT", str(self.ports["stomp"])))
        (root / "conf" / "log4j.properties").write_text(LOG4J.replace("LOG", str(self.log_file())))

    def log_file(self) -> Path:
        return self.root / "log" / "activemq.log"

    def processes(self) -> list[tuple[str, list[str], dict[str, str], int]]:
        r = self.root
        argv = [
            shutil.which("java") or "java",
            f"-Xms{HEAP}",
            f"-Xmx{HEAP}",
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={r / 'tmp'}",
            f"-Dlog4j.configuration=file:{r / 'conf' / 'log4j.properties'}",
            f"-Dactivemq.classpath={r / 'conf'}",
            f"-Dactivemq.home={HOME}",
            f"-Dactivemq.base={r}",
            f"-Dactivemq.conf={r / 'conf'}",
            f"-Dactivemq.data={r / 'data'}",
            "-jar",
            str(JAR),
            "start",
            f"xbean:file:{r / 'conf' / 'activemq.xml'}",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIVEMQ_", "JAVA_TOOL_OPTIONS"))}
        return [("broker", argv, env, self.ports["stomp"])]

    def connect(self, listener: Any = None) -> Any:
        assert stomp is not None
        conn = stomp.Connection11(
            [("127.0.0.1", self.ports["stomp"])], auto_decode=False, heartbeats=(0, 0), reconnect_attempts_max=1
        )
        if listener is not None:
            conn.set_listener("bench", listener)
        conn.connect(wait=True, headers={"client-id": f"bench-{next(_names)}"})
        return conn

    def ready(self) -> None:
        self.connect().disconnect()

    def version(self) -> str | None:
        return debian.installed_version(PACKAGES[0])

    def settings(self) -> dict[str, Any]:
        return {
            "version": self.version(),
            "ports": self.ports,
            "bound_to": "127.0.0.1 (one STOMP transport connector; JMX off)",
            "store": "KahaDB, default journal disk syncs",
            "heap": HEAP,
            "prefetch": PREFETCH,
            "client": f"stomp.py {getattr(stomp, '__version__', None)}, STOMP 1.1, a connection per thread",
        }


class StompListener:
    """A stomp.py listener: receipts (waited for by the sending thread),
    messages (queued for the consuming thread), errors (raised, naming
    ``server``)."""

    def __init__(self, server: str = "ActiveMQ") -> None:
        self.server = server
        self.cv = threading.Condition()
        self.receipts: set[str] = set()
        self.messages: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.errors: list[str] = []

    def on_receipt(self, frame: Any) -> None:
        with self.cv:
            self.receipts.add(frame.headers.get("receipt-id", ""))
            self.cv.notify_all()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_error(self, frame: Any) -> None:
        with self.cv:
            self.errors.append(frame.headers.get("message", "ERROR frame"))
            self.cv.notify_all()

    def raise_error(self) -> None:
        if self.errors:
            raise RuntimeError(f"{self.server}: {self.errors[-1]}")

    def wait(self, receipt: str) -> None:
        with self.cv:
            ok = self.cv.wait_for(lambda: receipt in self.receipts or self.errors, RECEIPT_TIMEOUT)
            self.raise_error()
            if not ok:
                raise TimeoutError(f"no receipt {receipt} from {self.server} in {RECEIPT_TIMEOUT:.0f} s")
            self.receipts.discard(receipt)


class ActiveMQClient(Client):
    """One run against an :class:`ActiveMQ`: a fresh queue (or the one named),
    producers and consumers on their own STOMP connections."""

    def __init__(self, server: ActiveMQ, mode: str, body: bytes, queue: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        super().__init__(server, mode, body)
        self.amq = server
        self.destination = f"/queue/{queue or f'bench-{os.getpid()}-{next(_names)}'}"
        self.headers = {"persistent": "false" if mode == "non-persistent" else "true"}

    def producer(self) -> tuple[Send, Close]:
        listener = StompListener()
        try:
            conn = self.amq.connect(listener)
        except BaseException as e:
            self._setup_failed(e)
            raise
        destination, headers, mode = self.destination, self.headers, self.mode
        ids = itertools.count(1)
        state: dict[str, Any] = {"tx": None, "in_tx": 0}

        def send() -> None:
            if mode == "persistent":
                receipt = f"r{next(ids)}"
                conn.send(destination, self.payload(), headers={**headers, "receipt": receipt})
                listener.wait(receipt)
            elif mode == "batched":
                if state["tx"] is None:
                    state["tx"] = conn.begin()
                conn.send(destination, self.payload(), headers=headers, transaction=state["tx"])
                state["in_tx"] += 1
                if state["in_tx"] >= BATCH:
                    commit()
            else:
                conn.send(destination, self.payload(), headers=headers)
                if listener.errors:
                    raise RuntimeError(f"ActiveMQ: {listener.errors[-1]}")

        def commit() -> None:
            receipt = f"c{next(ids)}"
            conn.commit(state["tx"], headers={"receipt": receipt})
            listener.wait(receipt)
            state["tx"], state["in_tx"] = None, 0

        def finish() -> None:
            try:
                if state["tx"] is not None:
                    commit()
            finally:
                conn.disconnect(receipt=f"d{next(ids)}")  # waits: everything sent has arrived

        self._joined()
        return send, finish

    def consumer(self) -> tuple[Receive, Close]:
        listener = StompListener()
        try:
            conn = self.amq.connect(listener)
            conn.subscribe(
                self.destination,
                id="1",
                ack="client-individual",
                headers={"activemq.prefetchSize": str(PREFETCH)},
            )
        except BaseException as e:
            self._setup_failed(e)
            raise
        messages = listener.messages

        def receive(timeout: float) -> int:
            try:
                frame = messages.get(timeout=timeout)
            except queue.Empty:
                return 0
            conn.ack(frame.headers["message-id"], frame.headers["subscription"])
            self.check(frame.body)
            return 1

        def close() -> None:
            try:
                conn.unsubscribe("1")
            finally:
                conn.disconnect(receipt=f"d{next(_names)}")

        self._joined()
        return receive, close

    def drain(self, quiet: float = 0.5, limit: float = 60.0) -> int:
        """Receive (and acknowledge) whatever is left on the queue: the count."""
        listener = StompListener()
        conn = self.amq.connect(listener)
        n = 0
        try:
            conn.subscribe(self.destination, id="1", ack="client-individual")
            deadline = threading.Event()
            timer = threading.Timer(limit, deadline.set)
            timer.start()
            try:
                while not deadline.is_set():
                    try:
                        frame = listener.messages.get(timeout=quiet)
                    except queue.Empty:
                        break
                    conn.ack(frame.headers["message-id"], frame.headers["subscription"])
                    if len(frame.body) == len(self.body):
                        n += 1
                    else:
                        self.wrong_bodies += 1
            finally:
                timer.cancel()
        finally:
            conn.disconnect(receipt=f"d{next(_names)}")
        return n

    def remaining(self) -> int:
        return self.drain(quiet=0.3)

    def settings(self) -> dict[str, Any]:
        return {"mode": MODES[self.mode], "prefetch": PREFETCH, "ack": "client-individual, ACK each"}

    def close(self, delete: bool = True) -> None:
        """Nothing to release: a queue stays in the scratch broker (STOMP cannot delete one)."""
