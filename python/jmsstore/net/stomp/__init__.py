"""STOMP 1.2 (https://stomp.github.io/stomp-specification-1.2.html), the
open text protocol that ActiveMQ, Artemis and RabbitMQ speak too."""

from jmsstore.net.stomp.frames import (
    ALL_COMMANDS,
    BODY_COMMANDS,
    CLIENT_COMMANDS,
    SERVER_COMMANDS,
    UNESCAPED_COMMANDS,
    Command,
    Frame,
    FrameError,
    FrameLimits,
    FrameParser,
    encode,
    error_frame,
)
from jmsstore.net.stomp.mapping import ProtocolError
from jmsstore.net.stomp.security import Security, User, hash_password, verify_password
from jmsstore.net.stomp.server import StompServer, serve
from jmsstore.net.stomp.settings import StompSettings
from jmsstore.net.stomp.transport import server_tls_context

__all__ = [
    "ALL_COMMANDS",
    "BODY_COMMANDS",
    "CLIENT_COMMANDS",
    "SERVER_COMMANDS",
    "UNESCAPED_COMMANDS",
    "Command",
    "Frame",
    "FrameError",
    "FrameLimits",
    "FrameParser",
    "ProtocolError",
    "Security",
    "StompServer",
    "StompSettings",
    "User",
    "encode",
    "error_frame",
    "hash_password",
    "serve",
    "server_tls_context",
    "verify_password",
]
