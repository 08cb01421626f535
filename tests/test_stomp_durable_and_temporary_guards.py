"""What one STOMP client may do to what is another's: a durable
subscription is opened, replaced or removed only by a user who may
receive from its topic (a client id is anyone's to give on CONNECT); a
client cannot make or use a queue named as the broker names temporary
queues, and its own ``/temp-queue/NAME`` is made whatever others did.

Loopback only; every wait is bounded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from jmsstore import JMSServer, Queue
from jmsstore.net import StompServer, serve
from jmsstore.net.stomp.frames import Frame
from jmsstore.net.stomp.security import Security, User, hash_password
from stomp_helpers import WAIT, RawClient

SECRET_HASH = hash_password("pw")


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[JMSServer, StompServer]]:
    users = getattr(request, "param", None)
    jms = JMSServer(tmp_path / "home")
    stomp = serve(jms, port=0, security=Security(users) if users else None)
    try:
        yield jms, stomp
    finally:
        stomp.close()
        jms.close()


@pytest.fixture
def client(served: tuple[JMSServer, StompServer]) -> Iterator[Callable[..., RawClient]]:
    """``client(login=None, client_id=None)``: a connected raw client."""
    opened: list[RawClient] = []

    def open_(login: str | None = None, client_id: str | None = None) -> RawClient:
        r = RawClient(served[1].address, timeout=WAIT)
        opened.append(r)
        head = "CONNECT\naccept-version:1.2\nhost:h\n"
        if login is not None:
            head += f"login:{login}\npasscode:pw\n"
        if client_id is not None:
            head += f"client-id:{client_id}\n"
        r.send((head + "\n\x00").encode())
        assert r.next_frame().command == "CONNECTED"
        return r

    yield open_
    for r in opened:
        r.close()


def frame(r: RawClient, text: str) -> Frame:
    """Sends a frame asking for receipt ``done``; the RECEIPT or ERROR that answers it."""
    r.send(text.replace("\n\n", "\nreceipt:done\n\n", 1).encode() + b"\x00")
    held: list[Frame] = []  # MESSAGE frames that came first stay for next_frame
    answer = r.next_frame()
    while answer.command == "MESSAGE":
        held.append(answer)
        answer = r.next_frame()
    r.frames[:0] = held
    return answer


def durable(jms: JMSServer) -> list[tuple[str, str, int]]:
    return [(s["client_id"], s["name"], s["messages"]) for s in jms.durable_subscriptions()]


USERS = [
    User("alice", SECRET_HASH, receive=("/topic/secret",)),
    User("mallory", SECRET_HASH, receive=("/queue/m",)),
    User("eve", SECRET_HASH, receive=("/topic/public",)),
]


def alices_subscription(client: Callable[..., RawClient]) -> None:
    """alice's durable subscription feed, of client id alice-app, with a message waiting."""
    alice = client("alice", "alice-app")
    subscribe = "SUBSCRIBE\nid:1\ndestination:/topic/secret\nactivemq.subscriptionName:feed\n\n"
    assert frame(alice, subscribe).command == "RECEIPT"
    assert frame(alice, "UNSUBSCRIBE\nid:1\n\n").command == "RECEIPT"  # stops it, keeps it
    assert frame(alice, "SEND\ndestination:/topic/secret\n\nfor alice").command == "RECEIPT"
    assert frame(alice, "DISCONNECT\n\n").command == "RECEIPT"


@pytest.mark.parametrize("served", [USERS], indirect=True)
def test_a_user_who_may_not_receive_from_its_topic_cannot_remove_a_durable_subscription(
    served: tuple[JMSServer, StompServer], client: Callable[..., RawClient]
) -> None:
    jms, _ = served
    alices_subscription(client)
    assert durable(jms) == [("alice-app", "feed", 1)]
    mallory = client("mallory", "alice-app")  # the same client id: nothing ties it to alice
    assert frame(mallory, "SUBSCRIBE\nid:1\ndestination:/queue/m\n\n").command == "RECEIPT"
    answer = frame(mallory, "UNSUBSCRIBE\nid:1\nactivemq.subscriptionName:feed\n\n")
    assert answer.command == "ERROR"
    message = answer.header("message") or ""
    assert "user 'mallory' may not receive from the topic of durable subscription 'feed'" in message
    assert "secret" not in message  # nor learns it
    assert mallory.closed_by_server()
    assert durable(jms) == [("alice-app", "feed", 1)]  # and its message


@pytest.mark.parametrize("served", [USERS], indirect=True)
def test_a_user_who_may_not_receive_from_its_topic_cannot_replace_a_durable_subscription(
    served: tuple[JMSServer, StompServer], client: Callable[..., RawClient]
) -> None:
    jms, _ = served
    alices_subscription(client)
    eve = client("eve", "alice-app")
    # The same name on another topic would replace alice's subscription, messages and all.
    answer = frame(eve, "SUBSCRIBE\nid:1\ndestination:/topic/public\nactivemq.subscriptionName:feed\n\n")
    assert answer.command == "ERROR"
    assert "user 'eve' may not receive from the topic of durable subscription 'feed'" in str(answer.header("message"))
    assert durable(jms) == [("alice-app", "feed", 1)]
    # Its owner still may: ActiveMQ's way, a SUBSCRIBE to its topic and an UNSUBSCRIBE naming it.
    alice = client("alice", "alice-app")
    subscribe = "SUBSCRIBE\nid:1\ndestination:/topic/secret\nactivemq.subscriptionName:feed\n\n"
    assert frame(alice, subscribe).command == "RECEIPT"
    assert frame(alice, "UNSUBSCRIBE\nid:1\nactivemq.subscriptionName:feed\n\n").command == "RECEIPT"
    assert durable(jms) == []


def next_temporary_name(jms: JMSServer) -> str:
    """The server-wide name the broker gives its next temporary queue (TEMP.SERVER.BOOT.N)."""
    probe = jms.port.create_temporary_queue(0)
    jms.port.delete_temporary_queue(probe, True)
    prefix, _, number = probe.name.rpartition(".")
    return f"{prefix}.{int(number) + 1}"


def test_a_client_may_not_subscribe_to_a_queue_of_a_temporary_name(
    served: tuple[JMSServer, StompServer], client: Callable[..., RawClient]
) -> None:
    jms, _ = served
    taken = next_temporary_name(jms)
    squatter, owner = client(), client()
    answer = frame(squatter, f"SUBSCRIBE\nid:1\ndestination:/queue/{taken}\n\n")
    assert answer.command == "ERROR"
    assert f"/queue/{taken} is in the temporary queues' namespace" in (answer.header("message") or "")
    assert Queue(taken) not in jms.destinations()
    # The connection the name would have gone to makes its temporary queue as ever.
    assert frame(owner, "SUBSCRIBE\nid:1\ndestination:/temp-queue/mine\n\n").command == "RECEIPT"
    assert frame(owner, "SEND\ndestination:/temp-queue/mine\n\nreply").command == "RECEIPT"
    message = owner.next_frame()
    assert message.command == "MESSAGE" and message.body == b"reply"


def test_a_temporary_queue_is_made_even_when_a_queue_took_its_name(
    served: tuple[JMSServer, StompServer], client: Callable[..., RawClient]
) -> None:
    jms, _ = served
    taken = next_temporary_name(jms)
    jms.create_queue(taken)  # as a SEND to /queue/TEMP... from an older client made it
    owner = client()
    assert frame(owner, "SUBSCRIBE\nid:1\ndestination:/temp-queue/mine\n\n").command == "RECEIPT"
    assert frame(owner, "SEND\ndestination:/temp-queue/mine\n\nreply").command == "RECEIPT"
    message = owner.next_frame()
    assert message.command == "MESSAGE" and message.body == b"reply"
