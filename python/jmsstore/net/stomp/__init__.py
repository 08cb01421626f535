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
from jmsstore.net.stomp.server import StompServer, serve
from jmsstore.net.stomp.settings import StompSettings

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
    "StompServer",
    "StompSettings",
    "encode",
    "error_frame",
    "serve",
]
