"""JMS servers from a TOML file (``JMSServer.from_config``): stores, servers,
quotas, templates, destinations, error destinations, connection factories;
wrong files are refused with the file, key and reason, before anything
changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from jms_helpers import drain, texts
from jmsstore import ConfigError, JMSServer, ResourceAllocationError, TextMessage
from jmsstore.broker import open_all

GOOD = """
[servers.jms1]
directory = "data/jms1"
messages_maximum = 1000
blocking_send_policy = "preemptive"
expiration_scan_interval = 0

[servers.jms1.quotas.orders]
messages_maximum = 2
policy = "fifo"

[servers.jms1.templates.standard]
redelivery_limit = 3
error_destination = "DLQ"
expiration_policy = "log"

[servers.jms1.queues.orders]
template = "standard"
quota = "orders"
redelivery_limit = 5            # overrides the template's

[servers.jms1.queues.audit]
template = "standard"

[servers.jms1.queues.DLQ]       # defined after the queues that use it

[servers.jms1.topics.prices]
messages_limit_override = 100
order = "fifo"

[servers.jms1.connection_factories.strict]
send_timeout = 0
messages_maximum = 4
"""


Q = "[servers.s]\ndirectory = 'd'\n[servers.s.queues.q]\n"  # a server with one queue, settings to follow


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jms.toml"
    path.write_text(text)
    return path


def test_a_server_is_built_from_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    with JMSServer.from_config(path) as server:
        assert server.name == "jms1"
        assert server.store.path == str(tmp_path / "data/jms1/store")
        assert sorted(d.name for d in server.destinations()) == ["DLQ", "audit", "orders", "prices"]
        orders = server.settings(server.queue("orders"))
        assert (orders.quota, orders.redelivery_limit, orders.error_destination, orders.expiration_policy) == (
            "orders",
            5,
            "DLQ",
            "log",
        )
        assert server.settings(server.queue("audit")).redelivery_limit == 3  # the template's
        assert server.settings(server.topic("prices")).messages_limit_override == 100
        assert server.quotas()["orders"].messages_maximum == 2
        assert server.statistics()["server_quota"]["messages_maximum"] == 1000
        strict = server.connection_factories["strict"]
        assert (strict.send_timeout, strict.messages_maximum) == (0, 4)
        with strict.create_connection() as connection:
            producer = connection.create_session().create_producer(server.queue("orders"))
            producer.send(TextMessage("1"))
            producer.send(TextMessage("2"))
            with pytest.raises(ResourceAllocationError, match="quota 'orders'"):
                producer.send(TextMessage("3"))
    # Opening again changes nothing and finds what was stored.
    with JMSServer.from_config(path) as server, server.connection_factory().create_connection() as connection:
        connection.start()
        consumer = connection.create_session().create_consumer(server.queue("orders"))
        assert texts(drain(consumer)) == ["1", "2"]


def test_servers_can_share_a_store(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[stores.main]
directory = "data/store"

[servers.a]
store = "main"
[servers.a.queues.qa]

[servers.b]
store = "main"
[servers.b.queues.qb]
""",
    )
    servers = open_all(path)
    try:
        assert servers["a"].store is servers["b"].store
        assert [d.name for d in servers["a"].destinations()] == ["qa"]
        assert [d.name for d in servers["b"].destinations()] == ["qb"]
    finally:
        for server in servers.values():
            server.close()
        servers["a"].store.close()


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("[servers.s]\ndirectory = 'd'\ncolour = 'red'\n", "servers.s.colour", "unknown key"),
        ("[servers.s]\ndirectory = 'd'\nmessages_maximum = 'many'\n", "servers.s.messages_maximum", "must be int"),
        ("[servers.s]\ndirectory = 'd'\nmessages_maximum = true\n", "servers.s.messages_maximum", "must be int"),
        ("[servers.s]\n", "servers.s", "needs a directory"),
        (
            Q + "quota = 'none'\n",
            "servers.s.queues.q.quota",
            "no quota",
        ),
        (
            Q + "template = 't'\n",
            "servers.s.queues.q.template",
            "no template",
        ),
        (
            Q + "colour = 1\n",
            "servers.s.queues.q.colour",
            "unknown setting",
        ),
        (
            Q + "error_destination = 'DLQ'\n",
            "servers.s.queues.q.error_destination",
            "no destination 'DLQ'",
        ),
        (
            Q + "redelivery_limit = -7\n",
            "servers.s.queues.q",
            "redelivery_limit",
        ),
        ("[servers.s]\ndirectory = 'd'\n[servers.s.quotas.q]\npolicy = 'lifo'\n", "servers.s.quotas.q", "policy"),
        (
            "[servers.s]\ndirectory = 'd'\n[servers.s.connection_factories.f]\nsend_timeout = 1.5\n",
            "servers.s.connection_factories.f.send_timeout",
            "must be int",
        ),
        ("[servers.s]\nstore = 'nowhere'\n", "servers.s.store", "no store 'nowhere'"),
        ("[brokers.s]\n", "brokers", "unknown table"),
        ("[servers.s\n", "", "not valid TOML"),
        ("[servers.s]\ndirectory = 'd'\nblocking_send_policy = 'lifo'\n", "servers.s", "policy"),
        ("[servers.s]\ndirectory = 'd'\nsystem_max_count = -5\n", "servers.s.system_max_count", "-1"),
        ("[servers.s]\ndirectory = 'd'\nmessage_buffer_size = 0\n", "servers.s.message_buffer_size", "more than 0"),
        (
            "[servers.s]\ndirectory = 'd'\n[servers.s.connection_factories.f]\nflow_minimum = 10\nflow_maximum = 5\n",
            "servers.s.connection_factories.f",
            "flow_minimum",
        ),
        (
            "[servers.s]\ndirectory = 'd'\n[servers.s.queues.x]\n[servers.s.topics.x]\n",
            "servers.s.topics.x",
            "also a queue",
        ),
        (
            "[servers.s]\ndirectory = 'd'\n[servers.s.templates.unused]\nredelivery_limit = -7\n",
            "servers.s.templates.unused",
            "redelivery_limit",
        ),
        (
            "[servers.s]\ndirectory = 'd'\nsync_policy = 'sometimes'\n",
            "servers.s.sync_policy",
            "must be one of",
        ),
        ("", "servers", "defines no server"),
        # Found wrong only once the store is open: what the open made goes again.
        ("[servers.s]\ndirectory = 'd'\nmaximum_message_size = 100000000\n", "servers.s", "maximum_message_size"),
        (
            "[stores.st]\ndirectory = 'd'\n[servers.s]\nstore = 'st'\nmaximum_message_size = 100000000\n",
            "servers.s",
            "maximum_message_size",
        ),
        (
            "[servers.s]\ndirectory = 'd'\nsystem_max_count = 9223372036854775808\n",
            "servers.s.system_max_count",
            "up to",
        ),
        (
            "[servers.s]\ndirectory = 'd'\n[servers.s.queues.q]\nerror_destination = 'nowhere'\n",
            "servers.s.queues.q.error_destination",
            "no destination 'nowhere'",
        ),
    ],
)
def test_wrong_files_name_the_file_key_and_reason_and_open_nothing(
    tmp_path: Path, text: str, key: str, reason: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        JMSServer.from_config(path)
    error = caught.value
    assert (error.path, error.key) == (str(path), key)
    assert reason in error.reason
    assert str(path) in str(error) and key in str(error)
    assert not (tmp_path / "d").exists()  # nothing was created


def test_a_file_that_contradicts_the_stored_state_changes_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, Q + "order = 'fifo'\n")
    JMSServer.from_config(path).close()
    _write(tmp_path, Q + "order = 'lifo'\n[servers.s.queues.new]\n")
    with pytest.raises(ConfigError, match="order"):
        JMSServer.from_config(path)
    with JMSServer(tmp_path / "d", name="s") as server:
        assert [d.name for d in server.destinations()] == ["q"]  # "new" was not created


def test_choosing_among_several_servers(tmp_path: Path) -> None:
    path = _write(tmp_path, "[servers.a]\ndirectory = 'a'\n[servers.b]\ndirectory = 'b'\n")
    with pytest.raises(ConfigError, match="say which"):
        JMSServer.from_config(path)
    with pytest.raises(ConfigError, match="no server 'c'"):
        JMSServer.from_config(path, "c")
    with JMSServer.from_config(path, "b") as server:
        assert server.name == "b" and os.path.isdir(tmp_path / "b")


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        JMSServer.from_config(tmp_path / "missing.toml")
