"""Users of the STOMP server: CONNECT must log in once any user is
configured, and each user sends to and receives from only the
destinations it is allowed; passwords are salted scrypt hashes, made by
``jmsstore passwd``; the ``[servers.NAME.stomp]`` table of a TOML
configuration declares them for ``jmsstore serve``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from jmsstore import ConfigError, InvalidArgumentError, JMSServer, Queue
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp import config as stomp_config
from jmsstore.net.stomp.security import Security, User, hash_password, verify_password
from stomp_helpers import WAIT, RawClient, Served

# One hash for the whole module: scrypt is slow on purpose.
SECRET_HASH = hash_password("s3cret")


def test_a_password_verifies_against_its_salted_hash_only() -> None:
    assert SECRET_HASH.startswith("scrypt$")
    assert verify_password(SECRET_HASH, "s3cret")
    assert not verify_password(SECRET_HASH, "s3cret ")
    assert hash_password("s3cret") != SECRET_HASH  # salted


@pytest.mark.parametrize("stored", ["s3cret", "scrypt$1$8$1$AAAA$AAAA", "scrypt$16384$8$1$!!$??", "md5$x"])
def test_a_password_that_is_not_a_hash_is_refused(stored: str) -> None:
    with pytest.raises(InvalidArgumentError):
        User("alice", stored)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[JMSServer, StompServer]]:
    users = [
        User("alice", SECRET_HASH, send=("/queue/orders.*",), receive=("/queue/orders.*", "/topic/*")),
        User("root", SECRET_HASH),
    ]
    jms = JMSServer(tmp_path / "home")
    stomp = serve(jms, port=0, security=Security(users))
    try:
        yield jms, stomp
    finally:
        stomp.close()
        jms.close()


@pytest.fixture
def connect(secured: tuple[JMSServer, StompServer]) -> Iterator[Callable[..., tuple[RawClient, str, str]]]:
    """``connect(login, passcode)``: a raw client, the command and message of the server's answer."""
    opened: list[RawClient] = []

    def open_(login: str | None, passcode: str | None) -> tuple[RawClient, str, str]:
        r = RawClient(secured[1].address, timeout=WAIT)
        opened.append(r)
        head = "CONNECT\naccept-version:1.2\nhost:h\n"
        if login is not None:
            head += f"login:{login}\n"
        if passcode is not None:
            head += f"passcode:{passcode}\n"
        r.send((head + "\n\x00").encode())
        reply = r.next_frame()
        return r, reply.command, reply.header("message") or ""

    yield open_
    for r in opened:
        r.close()


@pytest.mark.parametrize(
    ("login", "passcode"), [(None, None), ("alice", None), ("alice", "wrong"), ("mallory", "s3cret")]
)
def test_connect_without_a_valid_login_is_refused(
    connect: Callable[..., tuple[RawClient, str, str]],
    secured: tuple[JMSServer, StompServer],
    login: str | None,
    passcode: str | None,
) -> None:
    r, command, message = connect(login, passcode)
    assert command == "ERROR"
    assert message == "login failed: unknown login or wrong passcode"  # the same for every reason
    assert r.closed_by_server()
    assert secured[1].statistics()["logins_failed"] == 1


def test_a_user_sends_and_receives_where_allowed(connect: Callable[..., tuple[RawClient, str, str]]) -> None:
    r, command, _ = connect("alice", "s3cret")
    assert command == "CONNECTED"
    r.send(b"SUBSCRIBE\nid:s\ndestination:/queue/orders.eu\nreceipt:sub\n\n\x00")
    assert r.next_frame().header("receipt-id") == "sub"
    r.send(b"SEND\ndestination:/queue/orders.eu\nreceipt:sent\n\nhello\x00")
    frames = [r.next_frame(), r.next_frame()]
    assert sorted(f.command for f in frames) == ["MESSAGE", "RECEIPT"]


@pytest.mark.parametrize(
    "frame",
    [
        b"SEND\ndestination:/queue/payroll\n\nx\x00",
        b"SEND\ndestination:/topic/news\n\nx\x00",  # may receive from topics, not send
        b"SUBSCRIBE\nid:s\ndestination:/queue/payroll\n\n\x00",
    ],
    ids=["send-queue", "send-topic", "subscribe"],
)
def test_a_destination_the_user_may_not_use_is_an_error_and_is_not_created(
    connect: Callable[..., tuple[RawClient, str, str]], secured: tuple[JMSServer, StompServer], frame: bytes
) -> None:
    r, command, _ = connect("alice", "s3cret")
    assert command == "CONNECTED"
    r.send(frame)
    error = r.next_frame()
    assert error.command == "ERROR"
    assert "user 'alice' may not" in (error.header("message") or "")
    assert r.closed_by_server()
    assert Queue("payroll") not in secured[0].destinations()


def test_a_user_without_lists_may_use_every_destination(connect: Callable[..., tuple[RawClient, str, str]]) -> None:
    r, command, _ = connect("root", "s3cret")
    assert command == "CONNECTED"
    r.send(b"SEND\ndestination:/queue/payroll\nreceipt:ok\n\nx\x00")
    assert r.next_frame().header("receipt-id") == "ok"


# ---------------------------------------------------------------- configuration


def write_config(tmp_path: Path, stomp_table: str) -> Path:
    path = tmp_path / "jms.toml"
    path.write_text(f'[servers.jms1]\ndirectory = "home"\n\n[servers.jms1.stomp]\n{stomp_table}')
    return path


def test_the_configuration_declares_listen_limits_and_users(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        f'listen = ["127.0.0.1:0", "[::1]:61614"]\nmax_connections = 7\nidle_timeout = 30\n'
        f"heart_beat = [0, 0]\nmax_frame_bytes = 65536\n\n"
        f'[servers.jms1.stomp.users.alice]\npassword = "{SECRET_HASH}"\nsend = ["/queue/*"]\n',
    )
    endpoint = stomp_config.load(path, "jms1")
    assert endpoint.listen == [("127.0.0.1", 0), ("::1", 61614)]
    assert endpoint.options["max_connections"] == 7 and endpoint.options["idle_timeout"] == 30.0
    assert endpoint.options["heart_beat"] == (0, 0)
    assert endpoint.options["frame_limits"].max_frame_bytes == 65536
    assert endpoint.security.required
    assert endpoint.security.users["alice"].send == ("/queue/*",)
    with JMSServer.from_config(path) as jms:  # the broker's own reading leaves the table to serve
        assert jms.name == "jms1"


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("nonsense = 1\n", "servers.jms1.stomp.nonsense"),
        ("max_connections = 0\n", "servers.jms1.stomp"),
        ('listen = ["localhost"]\n', "servers.jms1.stomp.listen"),
        ("[servers.jms1.stomp.users.bob]\npassword = 'plain'\n", "servers.jms1.stomp.users.bob.password"),
        ("[servers.jms1.stomp.users.bob]\nsend = ['/queue/*']\n", "servers.jms1.stomp.users.bob.password"),
        ('certfile = "cert.pem"\n', "servers.jms1.stomp"),
    ],
)
def test_a_wrong_stomp_table_is_a_config_error_naming_the_key(tmp_path: Path, table: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        stomp_config.load(write_config(tmp_path, table), "jms1")
    assert raised.value.key == key


def test_jmsstore_passwd_prints_a_hash_that_verifies() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "jmsstore", "passwd", "--stdin"],
        input="correct horse\n",
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert verify_password(proc.stdout.strip(), "correct horse")


def test_jmsstore_serve_with_users_from_the_configuration(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        'listen = ["127.0.0.1:0"]\n\n'
        f'[servers.jms1.stomp.users.alice]\npassword = "{SECRET_HASH}"\nsend = ["/queue/in"]\n',
    )
    served = Served(path)
    try:
        anonymous = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        anonymous.send(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
        assert anonymous.next_frame().command == "ERROR"
        anonymous.close()
        alice = RawClient(("127.0.0.1", served.port), timeout=WAIT)
        alice.send(b"CONNECT\naccept-version:1.2\nhost:h\nlogin:alice\npasscode:s3cret\n\n\x00")
        assert alice.next_frame().command == "CONNECTED"
        alice.send(b"SEND\ndestination:/queue/in\nreceipt:ok\n\nx\x00")
        assert alice.next_frame().header("receipt-id") == "ok"
        alice.close()
        assert served.terminate() == 0
        assert any("login failed" in line for line in served.log)
        assert any("as user alice" in line for line in served.log)
    finally:
        served.kill()
