"""Expired messages (seed 000, "Handling Expired Messages"): expiration
policies discard, log and redirect; active scanning every
expiration_scan_interval seconds; passive removal when a consumer looks."""

from __future__ import annotations

import logging
import time

import pytest
from jms_helpers import NOTHING, SOON, Servers, connect, drain, receive_all, texts
from jmsstore import AckMode, InvalidArgumentError, JMSServer, TextMessage

TTL = 30  # ms: the messages of these tests expire almost at once


def _send_expiring(server: JMSServer, destination: object, text: str, **properties: object) -> None:
    with connect(server) as connection:
        message = TextMessage(text)
        for name, value in properties.items():
            message.set_property(name, value)
        connection.create_session().create_producer(destination).send(message, time_to_live=TTL, priority=7)
    time.sleep(TTL / 1000 * 3)


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + SOON
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)
    assert condition(), what  # type: ignore[operator]


def _expiry_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "jmsstore.expiration"]


def test_expired_messages_are_discarded_when_a_consumer_looks(server: JMSServer, servers: Servers) -> None:
    """Scan interval 0: "expired messages are passively removed from the
    system as they are discovered"; their quota room comes back."""
    server = servers.restart(server, expiration_scan_interval=0, messages_maximum=1)
    queue = server.create_queue("Q")
    _send_expiring(server, queue, "old")
    assert server.statistics()["messages_current"] == 1  # nobody looked yet
    with connect(server) as connection:
        consumer = connection.create_session().create_consumer(queue)
        assert consumer.receive(NOTHING) is None
    stats = server.statistics()
    assert stats["expired"] == 1 and stats["queues"]["Q"]["messages_expired"] == 1
    assert stats["messages_current"] == 0
    assert server.message_count(queue) == 0
    assert len(list(server.store.handles(server.layout.collection("q/Q")))) == 0


def test_an_active_scan_removes_expired_messages_nobody_looks_for(server: JMSServer, servers: Servers) -> None:
    server = servers.restart(server, expiration_scan_interval=0.05)
    queue = server.create_queue("Q")
    _send_expiring(server, queue, "old")
    _wait_for(lambda: server.statistics()["expired"] == 1, "the scan removed it")
    assert server.message_count(queue) == 0
    # The scan counts it, then deletes its record (a store write it waits for).
    _wait_for(lambda: not list(server.store.handles(server.layout.collection("q/Q"))), "its record was deleted")


def test_the_log_policy_logs_the_seed_format(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    server = servers.restart(server, expiration_scan_interval=0.05)
    queue = server.create_queue(
        "Q", expiration_policy="log", expiration_logging_policy="JMSPriority, JMSRedelivered, Color, Missing"
    )
    with caplog.at_level(logging.INFO, logger="jmsstore.expiration"):
        _send_expiring(server, queue, "old", Color="White", Weight=2680)
        # Logged just after it is counted: wait for the log itself.
        _wait_for(lambda: _expiry_logs(caplog), "the scan logged it")
    [record] = _expiry_logs(caplog)
    lines = record.getMessage().splitlines()
    assert lines[0].startswith("<ExpiredJMSMessage JMSMessageID='ID:jms1-") and lines[0].endswith("' >")
    assert lines[1:] == [
        " <HeaderFields JMSPriority='7' JMSRedelivered='false' />",
        " <UserProperties Color='White' />",
        "</ExpiredJMSMessage>",
    ]
    assert server.message_count(queue) == 0


def test_the_log_policy_shows_where_it_expired_and_its_delivery_state(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    server = servers.restart(server, expiration_scan_interval=0)
    queue = server.create_queue("Q", expiration_policy="log", expiration_logging_policy="%header%")
    with connect(server) as connection:
        session = connection.create_session(ack_mode=AckMode.CLIENT)
        session.create_producer(queue).send(TextMessage("m"), time_to_live=60_000)
        consumer = session.create_consumer(queue)
        assert consumer.receive(SOON) is not None
        session.recover()  # back, redelivered
        consumer.close()
    with caplog.at_level(logging.INFO, logger="jmsstore.expiration"):
        server.reaper.expire(int(time.time() * 1000) + 120_000)  # a scan two minutes on: it has expired
    [record] = _expiry_logs(caplog)
    headers = record.getMessage().splitlines()[1]
    assert "JMSDestination='queue://Q'" in headers, headers
    assert "JMSRedelivered='true'" in headers


def test_the_log_policy_with_no_fields_logs_the_message_id_only(
    server: JMSServer, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """ "The JMSMessageID field is always logged ... if the Expiration Policy
    is not defined ... the output contains only the JMSMessageID"."""
    server = servers.restart(server, expiration_scan_interval=0.05)
    queue = server.create_queue("Q", expiration_policy="log")
    with caplog.at_level(logging.INFO, logger="jmsstore.expiration"):
        _send_expiring(server, queue, "old")
        # Logged just after it is counted: wait for the log itself.
        _wait_for(lambda: _expiry_logs(caplog), "the scan logged it")
    [record] = _expiry_logs(caplog)
    text = record.getMessage()
    assert text.startswith("<ExpiredJMSMessage JMSMessageID='ID:jms1-") and text.endswith("' />")
    assert "\n" not in text


def test_the_redirect_policy_moves_expired_messages_to_the_error_destination(
    server: JMSServer, servers: Servers
) -> None:
    server = servers.restart(server, expiration_scan_interval=0.05)
    errors = server.create_queue("DLQ")
    queue = server.create_queue("Q", expiration_policy="redirect", error_destination="DLQ")
    _send_expiring(server, queue, "late")
    _wait_for(lambda: server.statistics()["expired_redirected"] == 1, "the scan moved it")
    assert server.message_count(queue) == 0
    [moved] = receive_all(server, errors)
    assert texts([moved]) == ["late"]
    assert moved.expiration == 0  # it would expire again at once
    # The move is durable: a restart still has it (and nothing in Q).
    _send_expiring(server, queue, "later")
    _wait_for(lambda: server.statistics()["expired_redirected"] == 2, "the scan moved it")
    server = servers.restart(server)
    assert server.message_count(queue) == 0
    with connect(server) as connection:
        assert texts(drain(connection.create_session().create_consumer(errors))) == ["later"]


def test_expiry_is_counted_per_durable_subscription(server: JMSServer, servers: Servers) -> None:
    server = servers.restart(server, expiration_scan_interval=0.05)
    topic = server.create_topic("T")
    with connect(server, "c", start=False) as connection:
        connection.create_session().create_durable_subscriber(topic, "s").close()
    _send_expiring(server, topic, "old")
    # Counted on the server, the subscription, then the topic: wait for the last.
    _wait_for(lambda: server.statistics()["topics"]["T"]["messages_expired"] == 1, "the scan removed it")
    [sub] = server.durable_subscriptions()
    assert (sub["messages_expired"], sub["messages_current"]) == (1, 0)
    assert server.statistics()["topics"]["T"]["messages_expired"] == 1


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"expiration_policy": "bogus"}, "expiration_policy must be"),
        ({"expiration_policy": "redirect"}, "needs an error_destination"),
        ({"expiration_policy": "log", "expiration_logging_policy": "%everything%"}, "keyword"),
    ],
)
def test_bad_expiration_settings_change_nothing(server: JMSServer, settings: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        server.create_queue("Q", **settings)
    assert server.destinations() == []


@pytest.mark.parametrize("interval", [-1, float("nan"), "30"])
def test_a_bad_scan_interval_is_refused(server_dir: object, interval: object) -> None:
    with pytest.raises((InvalidArgumentError, TypeError)):
        JMSServer(server_dir, expiration_scan_interval=interval)  # type: ignore[arg-type]
