"""``jmsstore stats``: a JMS server's statistics read from its store without
opening it (``jmsstore.broker.snapshot``). It writes nothing, works while the
server runs in another process, and reports what the server itself reports."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jmsstore import FileStore, JMSServer, TextMessage
from jmsstore.broker.snapshot import StoreSnapshot
from jmsstore.errors import ServerNotFoundError

Cli = Callable[..., subprocess.CompletedProcess[str]]
SEGMENT = 1 << 20

# Builds server "alpha" in a home directory: quotas (shared and not),
# queues, a topic with two durable subscriptions (one with a selector), a
# message consumed and acknowledged. Prints the live statistics as one JSON
# line, then keeps the server open until a line arrives on stdin.
SERVER_SCRIPT = r"""
import json, sys
from jmsstore import AckMode, JMSServer, TextMessage
home = sys.argv[1]
server = JMSServer(home, name="alpha", max_segment_bytes=1 << 20)
server.create_quota("shared", messages_maximum=100)
server.create_quota("own", bytes_maximum=100000, shared=False)
orders = server.create_queue("orders")
bills = server.create_queue("bills", quota="shared")
own1 = server.create_queue("own1", quota="own")
own2 = server.create_queue("own2", quota="own")
prices = server.create_topic("prices", quota="shared")
server.create_topic("idle")
with server.connection_factory().create_connection(client_id="c1") as connection:
    session = connection.create_session()
    session.create_durable_subscriber(prices, "all").close()
    session.create_durable_subscriber(prices, "big", selector="n > 2").close()
    for destination, count in ((orders, 4), (bills, 5), (own1, 2), (own2, 1), (prices, 4)):
        producer = session.create_producer(destination)
        for i in range(count):
            message = TextMessage("x" * (10 * i + 1))
            message.set_property("n", i)
            producer.send(message)
    connection.start()
    reader = connection.create_session(ack_mode=AckMode.CLIENT)
    consumer = reader.create_consumer(orders)
    consumer.receive(60).acknowledge()
    consumer.close()
print(json.dumps(server.statistics(), default=str), flush=True)
sys.stdin.readline()
server.close()
print("closed", flush=True)
"""


def tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every file and directory under ``root``: kind, size, mtime (ns) and content hash."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if path.is_dir():
            found[str(path.relative_to(root))] = ("dir", st.st_mtime_ns, st.st_mode)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(path.relative_to(root))] = ("file", st.st_size, st.st_mtime_ns, st.st_mode, digest)
    return found


def assert_clean_exit(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


def stored_figures(stats: dict[str, Any]) -> dict[str, Any]:
    """The figures of a server's statistics that the store holds (what the read-only view reports)."""
    per_target = ("messages", "messages_current", "bytes_current", "quota")
    return {
        "name": stats["name"],
        "boot": stats["boot"],
        "messages_current": stats["messages_current"],
        "bytes_current": stats["bytes_current"],
        "malformed_records": stats["malformed_records"],
        "queues": {q: {k: v[k] for k in per_target} for q, v in stats["queues"].items()},
        "topics": {t: {k: v[k] for k in (*per_target, "subscriptions")} for t, v in stats["topics"].items()},
        "durable_subscriptions": sorted(
            (
                {
                    k: s[k]
                    for k in (
                        "topic",
                        "name",
                        "client_id",
                        "selector",
                        "shared",
                        "no_local",
                        "messages",
                        "messages_current",
                        "bytes_current",
                    )
                }
                for s in stats["durable_subscriptions"]
            ),
            key=lambda s: s["name"],
        ),
        "server_quota": {k: stats["server_quota"][k] for k in ("quota", "messages", "bytes")},
        "quotas": {
            q: sorted(
                ({k: u[k] for k in ("quota", "messages_maximum", "bytes_maximum", "messages", "bytes")} for u in us),
                key=lambda u: (u["messages"], u["bytes"]),
            )
            for q, us in stats["quotas"].items()
        },
    }


class ServerProcess:
    """Server "alpha" running in a child process (see SERVER_SCRIPT)."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER_SCRIPT, str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("{"):
            self.proc.kill()
            _, err = self.proc.communicate()
            raise AssertionError(f"the server process failed: {line!r} {err}")
        self.statistics: dict[str, Any] = json.loads(line)

    def stop(self) -> None:
        out, err = self.proc.communicate("\n", timeout=120)
        assert self.proc.returncode == 0, err
        assert "closed" in out


@pytest.fixture
def server_process(tmp_path: Path) -> Any:
    started: list[ServerProcess] = []

    def start(home: Path) -> ServerProcess:
        started.append(ServerProcess(home))
        return started[-1]

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.communicate()


def test_stats_while_the_server_runs_in_another_process(tmp_path: Path, cli: Cli, server_process: Any) -> None:
    """The figures are the running server's own, and reading them changes nothing it owns."""
    home = tmp_path / "home"
    running = server_process(home)
    live = running.statistics
    assert live["queues"]["orders"]["messages"] == 3  # one of four was consumed
    before = tree(home)

    proc = cli("stats", str(home), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    read = json.loads(proc.stdout)
    assert stored_figures(read) == stored_figures(live)
    assert read["quotas"]["shared"][0]["messages"] == 5 + 4 + 1  # bills, and both subscriptions' copies
    assert [u["messages"] for u in read["quotas"]["own"]] == [2, 1]
    assert read["topics"]["idle"] == {
        "subscriptions": 0,
        "messages": 0,
        "messages_current": 0,
        "bytes_current": 0,
        "quota": None,
    }
    assert "read-only" in read["note"]
    text = cli("stats", str(home))  # with its progress on stderr
    assert_clean_exit(text, 0)
    assert "queue orders" in text.stdout and "durable subscription c1/big" in text.stdout
    assert "verifying the store" in text.stderr
    assert tree(home) == before

    running.stop()
    # The server, opened again, finds what the view found (its boot raised by one).
    with JMSServer(home, name="alpha", max_segment_bytes=SEGMENT, expiration_scan_interval=0) as server:
        reopened = stored_figures(server.statistics())
    assert reopened == {**stored_figures(read), "boot": read["boot"] + 1}


def test_stats_writes_nothing(tmp_path: Path, cli: Cli) -> None:
    """No boot counter raised, no paging directory, no spare segment: every
    file byte-identical, nothing created, for every form of the command."""
    home = tmp_path / "home"
    with JMSServer(home, name="demo", max_segment_bytes=SEGMENT) as server:
        queue = server.create_queue("orders")
        with server.connection_factory().create_connection() as connection:
            producer = connection.create_session().create_producer(queue)
            for i in range(3):
                producer.send(TextMessage(f"m{i}"))
    before = tree(tmp_path)
    for args, code in (
        (("stats", str(home)), 0),
        (("stats", str(home), "--json"), 0),
        (("stats", str(home), "--name", "demo", "--no-progress"), 0),
        (("stats", str(home), "--name", "jms1"), 1),
    ):
        assert_clean_exit(cli(*args), code)
    assert tree(tmp_path) == before
    data = json.loads(cli("stats", str(home), "--json", "--no-progress").stdout)
    assert data["name"] == "demo"
    assert data["boot"] == 1
    assert data["queues"]["orders"]["messages"] == 3
    assert tree(tmp_path) == before


def test_stats_of_an_absent_server_names_the_servers_found(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "home"
    store = home / "store"
    with FileStore(store, max_segment_bytes=SEGMENT) as shared:
        for name in ("east", "west"):
            with JMSServer(store=shared, name=name, paging_directory=tmp_path / "paging" / name) as server:
                server.create_queue("q")
    before = tree(tmp_path)

    proc = cli("stats", str(home), "--name", "jms1", "--no-progress")
    assert_clean_exit(proc, 1)
    assert "ServerNotFoundError" in proc.stderr
    assert "no JMS server 'jms1'" in proc.stderr and "'east', 'west'" in proc.stderr
    assert proc.stdout == ""
    # Several servers and no --name: say which.
    proc = cli("stats", str(home), "--json", "--no-progress")
    assert_clean_exit(proc, 1)
    assert "2 JMS servers" in proc.stderr and "'east', 'west'" in proc.stderr
    assert tree(tmp_path) == before

    assert_clean_exit(cli("stats", str(home), "--name", "west", "--no-progress"), 0)
    snapshot = StoreSnapshot.read(store)
    assert snapshot.servers == ["east", "west"]
    with pytest.raises(ServerNotFoundError) as info:
        snapshot.statistics("jms1")
    assert info.value.found == ("east", "west")


def test_stats_of_a_store_without_servers(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "home"
    with FileStore(home / "store", max_segment_bytes=SEGMENT) as store:
        store.put("not-a-server", b"x")
    before = tree(tmp_path)
    proc = cli("stats", str(home), "--no-progress")
    assert_clean_exit(proc, 1)
    assert "holds no JMS server" in proc.stderr
    assert tree(tmp_path) == before


def test_stats_from_a_config_file_reads_the_servers_store(tmp_path: Path, cli: Cli) -> None:
    config = tmp_path / "jms.toml"
    config.write_text(
        "[servers.s]\ndirectory = 'home'\nmessages_maximum = 50\n"
        "[servers.s.queues.orders]\n[servers.s.topics.prices]\nmessages_limit_override = 5\n"
    )
    # Never started: there is nothing to read, and nothing is created.
    proc = cli("stats", "--config", str(config), "--no-progress")
    assert_clean_exit(proc, 1)
    assert "holds no JMS server" in proc.stderr
    assert not (tmp_path / "home").exists()

    with JMSServer.from_config(config) as server, server.connection_factory().create_connection() as connection:
        connection.create_session().create_producer(server.queue("orders")).send(TextMessage("hello"))
    before = tree(tmp_path)
    proc = cli("stats", "--config", str(config), "--json", "--no-progress")
    assert_clean_exit(proc, 0)
    data = json.loads(proc.stdout)
    assert data["name"] == "s"
    assert data["topics"]["prices"]["subscriptions"] == 0
    assert data["queues"]["orders"]["messages"] == 1
    # The server's own quota is configured, not stored: the file gives its maximums.
    assert data["server_quota"]["messages_maximum"] == 50 and data["server_quota"]["messages"] == 1
    assert tree(tmp_path) == before


def test_records_the_server_cannot_use_are_counted_as_it_counts_them(tmp_path: Path, cli: Cli) -> None:
    """A stored message that is not a message, and a queue record with invalid
    settings (with its messages): counted as malformed, never as messages,
    as the server does when it opens (and sets them aside)."""
    home = tmp_path / "home"
    with JMSServer(home, max_segment_bytes=SEGMENT) as server:
        good, bad = server.create_queue("good"), server.create_queue("bad")
        with server.connection_factory().create_connection() as connection:
            session = connection.create_session()
            for queue in (good, bad):
                producer = session.create_producer(queue)
                for i in range(3):
                    producer.send(TextMessage(f"{queue.name} {i}"))
    with FileStore(home / "store", max_segment_bytes=SEGMENT) as store:
        store.put("jms/jms1/q/good", b"\x00 not a message")
        for handle, body in store.scan("jms/jms1/destinations"):
            record = json.loads(body)
            if record["name"] == "bad":
                record["settings"]["order"] = "random"
                store.update(handle, json.dumps(record).encode())

    read = json.loads(cli("stats", str(home), "--json", "--no-progress").stdout)
    assert read["malformed_records"] == 2
    assert list(read["queues"]) == ["good"] and read["queues"]["good"]["messages"] == 3
    assert read["orphaned_records"] == 3  # the invalid queue's messages
    with JMSServer(home, max_segment_bytes=SEGMENT, expiration_scan_interval=0) as server:
        live = server.statistics()
    assert stored_figures(live) == {**stored_figures(read), "boot": read["boot"] + 1}
    assert live["quarantined_records"] == 2 + 3  # what the open set aside
