"""Users, password hashes and permissions, as RabbitMQ keeps them.

Password hashes follow ``rabbit_password_hashing_sha256``: a 4-byte random salt, then
SHA-256 of salt + password, the two concatenated and base64-encoded."""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import re
from dataclasses import dataclass, field

HASHING_ALGORITHM = "rabbit_password_hashing_sha256"


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode()).digest()
    return base64.b64encode(salt + digest).decode()


def new_user_hash(password: str | None, password_hash: str | None) -> str:
    """What a new user keeps: the hash it was given, else its password's, else none (it
    cannot log in with a password)."""
    if password_hash is not None:
        return password_hash
    return hash_password(password) if password is not None else ""


def check_password(password: str, password_hash: str) -> bool:
    try:
        raw = base64.b64decode(password_hash)
    except ValueError:
        return False
    if len(raw) < 5:
        return False
    salt = raw[:4]
    return hmac.compare_digest(hash_password(password, salt), password_hash)


@dataclass
class User:
    name: str
    password_hash: str
    tags: list[str] = field(default_factory=list)
    # max-connections / max-channels, newest first as RabbitMQ keeps them
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def is_administrator(self) -> bool:
        return "administrator" in self.tags


@dataclass
class Permission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    # Answers already worked out, per (what, name); a changed permission is a new object.
    _seen: dict[tuple[str, str], bool] = field(default_factory=dict, repr=False, compare=False)

    def allows(self, what: str, name: str) -> bool:
        key = (what, name)
        seen = self._seen.get(key)
        if seen is not None:
            return seen
        pattern = getattr(self, what) or "^$"
        # RabbitMQ (rabbit_auth_backend_internal) matches with re:run: an unanchored
        # search over the name's UTF-8 bytes ("." is one byte), and "" means "^$".
        try:
            ok = re.search(pattern.encode(), name.encode()) is not None
        except re.error:
            ok = False
        if len(self._seen) > 10000:
            self._seen.clear()
        self._seen[key] = ok
        return ok


@dataclass
class TopicPermission:
    """What routing keys a user may publish with (write) and bind with (read) on one
    topic exchange of a vhost (rabbit_auth_backend_internal:check_topic_access)."""

    user: str
    vhost: str
    exchange: str
    write: str = ".*"
    read: str = ".*"
    _compiled: dict[str, re.Pattern[str] | None] = field(
        default_factory=dict, repr=False, compare=False
    )

    def allows(self, what: str, routing_key: str) -> bool:
        """An unanchored search of the pattern, {username} and {vhost} filled in; an
        empty pattern allows only the empty routing key ("^$")."""
        if what not in self._compiled:
            pattern = getattr(self, what) or "^$"
            pattern = pattern.replace("{username}", self.user).replace("{vhost}", self.vhost)
            try:
                self._compiled[what] = re.compile(pattern)
            except re.error:
                self._compiled[what] = None
        regex = self._compiled[what]
        return regex is not None and regex.search(routing_key) is not None


def is_loopback(address: str | None) -> bool:
    if not address:
        return True  # a unix socket or an in-process peer
    try:
        ip = ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class UserDatabase:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}
        self.loopback_users: set[str] = {"guest"}

    def add(self, user: User) -> None:
        """A new user, or one that replaces the user of that name."""
        self.users[user.name] = user

    def delete_user(self, name: str) -> bool:
        if self.users.pop(name, None) is None:
            return False
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        return True

    def authenticate(self, name: str, password: str, address: str | None) -> User | None:
        user = self.check_credentials(name, password)
        if user is None or self.loopback_only(name, address):
            return None
        return user

    def check_credentials(self, name: str, password: str) -> User | None:
        """The user, if the password is right (wherever it connects from)."""
        user = self.users.get(name)
        if user is None or not user.password_hash:
            return None
        if not check_password(password, user.password_hash):
            return None
        return user

    def authenticate_external(self, name: str, address: str | None) -> User | None:
        """SASL EXTERNAL: the TLS layer vouched for the name (its client certificate);
        the user must exist, and a loopback-only user must come from loopback."""
        user = self.users.get(name)
        if user is None:
            return None
        if self.loopback_only(name, address):
            return None
        return user

    def loopback_only(self, name: str, address: str | None) -> bool:
        """A loopback user (loopback_users) connecting from elsewhere: refused."""
        return name in self.loopback_users and not is_loopback(address)

    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        self.permissions[(user, vhost)] = Permission(user, vhost, configure, write, read)

    def clear_permissions(self, user: str, vhost: str) -> bool:
        return self.permissions.pop((user, vhost), None) is not None

    def permission(self, user: str, vhost: str) -> Permission | None:
        return self.permissions.get((user, vhost))
