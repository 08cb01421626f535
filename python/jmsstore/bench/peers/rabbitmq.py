"""RabbitMQ as a peer: Debian's ``rabbitmq-server`` started from scratch
directories, driven with pika (AMQP 0-9-1).

The server: our own ``epmd`` (``-address 127.0.0.1`` on a free port, given
to the node as ``ERL_EPMD_PORT``; without ``ERL_EPMD_ADDRESS`` it would
listen on every interface) and then the node itself, run as the current
user straight from ``/usr/lib/rabbitmq/bin/rabbitmq-server`` (the
``/usr/sbin`` wrapper would switch to the ``rabbitmq`` user), with a
unique node name, ``RABBITMQ_NODE_IP_ADDRESS=127.0.0.1``, the AMQP and
distribution ports picked free, the distribution bound to loopback
(``inet_dist_use_interface``), no plugins, and ``HOME`` (the Erlang
cookie), ``RABBITMQ_MNESIA_BASE``, ``RABBITMQ_LOG_BASE``, the config and
env files all under the scratch directory. Both are stopped at the end
(SIGTERM to each process group; epmd too, since we started it).

The client, per run: a fresh durable classic queue; one
``BlockingConnection`` per producer and per consumer thread (pika's
connections are not thread-safe); consumers with ``basic_qos`` prefetch
128 that ``basic_ack`` every message. Modes:

- ``persistent``: ``delivery_mode=2`` with publisher confirms; pika's
  blocking channel waits for each message's confirm, so a confirm per
  message (durable when ``basic_publish`` returns);
- ``batched``: ``delivery_mode=2`` on a transactional channel
  (``tx_select``) with a ``tx_commit`` per 100 messages: the blocking
  channel cannot have confirms outstanding, and a commit returns once
  its messages are safe, as a confirm does;
- ``non-persistent``: ``delivery_mode=1``, no confirms.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import debian
from jmsstore.bench.peers.servers import Client, Close, Receive, Send, Server, free_port

try:
    import pika
    import pika.exceptions
except ImportError as e:  # pragma: no cover - in the bench extras
    pika = None
    IMPORT_ERROR: str | None = f"pika is not installed ({e}; pip install pika)"
else:
    IMPORT_ERROR = None

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD = "epmd"
PACKAGES = ("rabbitmq-server",)
PREFETCH = 128
BATCH = 100
MODES = {
    "persistent": "pika, delivery_mode 2, a publisher confirm per message",
    "batched": f"pika, delivery_mode 2, tx_commit per {BATCH} (transactional channel)",
    "non-persistent": "pika, delivery_mode 1, no confirms",
}
_names = itertools.count(1)


def missing() -> str | None:
    """Why this peer cannot run here (None: it can)."""
    if IMPORT_ERROR is not None:
        return IMPORT_ERROR
    if not SERVER.exists():
        return f"RabbitMQ is not installed ({SERVER} missing; Debian package rabbitmq-server)"
    if shutil.which(EPMD) is None:
        return "epmd (Erlang) is not on PATH"
    return None


class RabbitMQ(Server):
    """A RabbitMQ node and its epmd, under ``root``, on loopback ports."""

    name = "rabbitmq"
    packages = PACKAGES

    def __init__(self, root: Path, log: Any = lambda _: None) -> None:
        super().__init__(root, log)
        self.ports = {"amqp": free_port(), "dist": free_port(), "epmd": free_port()}
        self.node = f"jmsstore-bench-{os.getpid()}-{self.ports['amqp']}@localhost"
        for d in ("mnesia", "log", "home"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "home").chmod(0o700)
        (root / "enabled_plugins").write_text("[].\n")
        (root / "rabbitmq-env.conf").write_text("")
        (root / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.ports['amqp']}\nloopback_users = none\n"
            # the bench's scratch file system may be small; RabbitMQ's default stops publishers below 50 MB
            "disk_free_limit.absolute = 10MB\n"
        )

    def environment(self) -> dict[str, str]:
        r = self.root
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(r / "home"),
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_EPMD_PORT=str(self.ports["epmd"]),
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.ports["amqp"]),
            RABBITMQ_DIST_PORT=str(self.ports["dist"]),
            RABBITMQ_MNESIA_BASE=str(r / "mnesia"),
            RABBITMQ_LOG_BASE=str(r / "log"),
            RABBITMQ_CONFIG_FILE=str(r / "rabbitmq.conf"),
            RABBITMQ_CONF_ENV_FILE=str(r / "rabbitmq-env.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(r / "enabled_plugins"),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        return env

    def processes(self) -> list[tuple[str, list[str], dict[str, str], int]]:
        env = self.environment()
        return [
            ("epmd", [EPMD, "-address", "127.0.0.1", "-port", str(self.ports["epmd"])], env, self.ports["epmd"]),
            ("node", [str(SERVER)], env, self.ports["amqp"]),
        ]

    def log_file(self) -> Path:
        return self.root / "log" / f"{self.node}.log"

    def connect(self) -> Any:
        assert pika is not None
        params = pika.ConnectionParameters(
            host="127.0.0.1",
            port=self.ports["amqp"],
            heartbeat=0,
            blocked_connection_timeout=120,
            connection_attempts=1,
            socket_timeout=10,
        )
        return pika.BlockingConnection(params)

    def ready(self) -> None:
        self.connect().close()

    def version(self) -> str | None:
        return debian.installed_version(PACKAGES[0])

    def crash(self, keep: tuple[str, ...] = ("epmd",)) -> None:
        super().crash(keep)

    def settings(self) -> dict[str, Any]:
        return {
            "version": self.version(),
            "node": self.node,
            "ports": self.ports,
            "bound_to": "127.0.0.1 (AMQP, distribution, epmd)",
            "queue": "classic, durable",
            "prefetch": PREFETCH,
            "client": f"pika {pika.__version__ if pika else None}, BlockingConnection per thread",
        }


class RabbitMQClient(Client):
    """One run against a :class:`RabbitMQ`: a fresh durable queue (or the one
    named), producers and consumers on their own connections."""

    def __init__(self, server: RabbitMQ, mode: str, body: bytes, queue: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(mode)
        super().__init__(server, mode, body)
        self.rabbit = server
        self.queue = queue or f"bench-{os.getpid()}-{next(_names)}"
        self._control = server.connect()
        self.found_messages = self._existing_depth()
        self._channel = self._control.channel()
        self._channel.queue_declare(self.queue, durable=True)
        self.properties = pika.BasicProperties(delivery_mode=2 if mode != "non-persistent" else 1)

    def producer(self) -> tuple[Send, Close]:
        try:
            connection = self.rabbit.connect()
            channel = connection.channel()
            if self.mode == "persistent":
                channel.confirm_delivery()
            elif self.mode == "batched":
                channel.tx_select()
        except BaseException as e:
            self._setup_failed(e)
            raise
        publish = channel.basic_publish
        queue, props = self.queue, self.properties
        pending = [0]

        def send() -> None:
            try:
                publish("", queue, self.payload(), props)
            except (pika.exceptions.NackError, pika.exceptions.UnroutableError):
                self.send_errors += 1
            if self.mode == "batched":
                pending[0] += 1
                if pending[0] >= BATCH:
                    channel.tx_commit()
                    pending[0] = 0

        def finish() -> None:
            try:
                if pending[0]:
                    channel.tx_commit()
            finally:
                connection.close()

        self._joined()
        return send, finish

    def consumer(self) -> tuple[Receive, Close]:
        try:
            connection = self.rabbit.connect()
            channel = connection.channel()
            channel.basic_qos(prefetch_count=PREFETCH)
        except BaseException as e:
            self._setup_failed(e)
            raise
        stream: list[Any] = []

        def receive(timeout: float) -> int:
            if not stream:
                stream.append(channel.consume(self.queue, auto_ack=False, inactivity_timeout=timeout))
            method, _props, body = next(stream[0])
            if method is None:
                return 0
            channel.basic_ack(method.delivery_tag)
            self.check(body)
            return 1

        def close() -> None:
            try:
                if stream:
                    channel.cancel()
            finally:
                connection.close()

        self._joined()
        return receive, close

    def _existing_depth(self) -> int | None:
        """The messages on the queue if it exists already (before this client
        declares it), else None: after a restart, whether the broker came
        back with its durable queue. A passive declare of a missing queue
        closes its channel, hence a channel of its own."""
        channel = self._control.channel()
        try:
            return int(channel.queue_declare(self.queue, durable=True, passive=True).method.message_count)
        except pika.exceptions.ChannelClosedByBroker:
            return None
        finally:
            if channel.is_open:
                channel.close()

    def remaining(self) -> int:
        return int(self._channel.queue_declare(self.queue, durable=True, passive=True).method.message_count)

    def settings(self) -> dict[str, Any]:
        return {"mode": MODES[self.mode], "queue": "durable classic", "prefetch": PREFETCH, "ack": "basic_ack each"}

    def close(self, delete: bool = True) -> None:
        try:
            if delete:
                self._channel.queue_delete(self.queue)
        finally:
            self._control.close()
