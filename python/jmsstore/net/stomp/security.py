"""Who may connect to a STOMP server and what each user may do.

Users are checked on CONNECT (its ``login`` and ``passcode`` headers)
when any are configured: a CONNECT without a valid pair gets an ERROR
frame and the connection closes, as ActiveMQ's authentication plugin
does. Each user may be limited to the destinations it may send to and
receive from, by patterns over STOMP destination names (``/queue/orders``,
``/queue/orders.*``, ``/topic/*``; ``*`` matches any run of characters);
a SEND or SUBSCRIBE outside them gets an ERROR frame. A user without a
``send`` (or ``receive``) list may send to (or receive from) every
destination, as with ActiveMQ's authentication plugin alone. A durable
subscription is opened, replaced or removed only by a user who may
receive from its topic: a client id, which any client may give on
CONNECT, is no proof of whose it is.

Passwords are stored as salted scrypt hashes, never in clear:
``scrypt$N$r$p$SALT$HASH`` (``SALT`` and ``HASH`` in base64), made by
:func:`hash_password` or ``jmsstore passwd``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jmsstore.errors import InvalidArgumentError

__all__ = ["Security", "User", "hash_password", "verify_password"]

# scrypt's cost: 16 MiB of memory and some tens of milliseconds per check
# (OWASP's minimum for scrypt is N=2^17 with r=8 at p=1; a server checks on
# every CONNECT, so this stays at the interactive setting of the scrypt paper).
_N, _R, _P = 1 << 14, 8, 1
_SALT_BYTES = 16
_HASH_BYTES = 32
_MAX_MEMORY = 64 * 1024 * 1024


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """A salted scrypt hash of ``password`` to put in the configuration."""
    salt = os.urandom(_SALT_BYTES) if salt is None else salt
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=_HASH_BYTES)
    return f"scrypt${_N}${_R}${_P}${_b64(salt)}${_b64(digest)}"


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt" or not all(p.isdigit() for p in parts[1:4]):
        raise InvalidArgumentError("a password hash is scrypt$N$r$p$SALT$HASH (made by jmsstore passwd)")
    n, r, p = (int(x) for x in parts[1:4])
    if n < 2 or n & (n - 1) or not 1 <= r <= 64 or not 1 <= p <= 16 or 128 * r * n > _MAX_MEMORY:
        raise InvalidArgumentError(f"the scrypt parameters of a password hash are out of range: N={n} r={r} p={p}")
    try:
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except binascii.Error:
        raise InvalidArgumentError("the salt and hash of a password hash must be base64") from None
    if not salt or len(digest) < 16:
        raise InvalidArgumentError("a password hash needs a salt and a hash of at least 16 bytes")
    return n, r, p, salt, digest


def verify_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches the hash ``stored`` (compared in constant time)."""
    n, r, p, salt, digest = _parse(stored)
    candidate = hashlib.scrypt(
        password.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r, p=p, dklen=len(digest), maxmem=_MAX_MEMORY * 2
    )
    return hmac.compare_digest(candidate, digest)


def _matcher(patterns: Iterable[str] | None) -> re.Pattern[str] | None:
    if patterns is None:
        return None
    # Only * is special: every other character stands for itself.
    parts = [".*".join(re.escape(chunk) for chunk in pattern.split("*")) for pattern in patterns]
    return re.compile("|".join(f"(?:{part})" for part in parts) if parts else "(?!)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class User:
    """A user: its password hash and the destinations it may send to and
    receive from (None: all; see the module documentation)."""

    name: str
    password_hash: str = field(repr=False)
    send: tuple[str, ...] | None = None
    receive: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _parse(self.password_hash)


class Security:
    """The users of a STOMP server, and their permissions."""

    def __init__(self, users: Iterable[User]) -> None:
        self.users: Mapping[str, User] = {user.name: user for user in users}
        self._send = {name: _matcher(user.send) for name, user in self.users.items()}
        self._receive = {name: _matcher(user.receive) for name, user in self.users.items()}
        # Checked when the login is unknown, so that a wrong name costs what a wrong password does.
        self._decoy = hash_password("", salt=b"\0" * _SALT_BYTES)

    @property
    def required(self) -> bool:
        """Whether CONNECT must carry a valid login and passcode."""
        return bool(self.users)

    def authenticate(self, login: str | None, passcode: str | None) -> User | None:
        """The user ``login`` if ``passcode`` is its password, else None."""
        user = self.users.get(login) if login is not None else None
        matches = verify_password(user.password_hash if user is not None else self._decoy, passcode or "")
        return user if user is not None and matches and passcode is not None else None

    def may_send(self, user: User | None, destination: str) -> bool:
        return self._allowed(self._send, user, destination)

    def may_receive(self, user: User | None, destination: str) -> bool:
        return self._allowed(self._receive, user, destination)

    def _allowed(self, matchers: Mapping[str, re.Pattern[str] | None], user: User | None, destination: str) -> bool:
        if user is None:
            return not self.required
        matcher = matchers.get(user.name)
        return matcher is None or matcher.fullmatch(destination) is not None
