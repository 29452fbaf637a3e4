"""Server-made names, as RabbitMQ makes them: generated ones (a prefix, a dash and 16 random
bytes in unpadded base64url, 22 characters) and a connection's."""

from __future__ import annotations

import base64
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.broker.users import User


def generate(prefix: str) -> str:
    token = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
    return f"{prefix}-{token}"


def queue_name() -> str:
    return generate("amq.gen")


def consumer_tag() -> str:
    return generate("amq.ctag")


def connection_name(peer: tuple[str, int] | None, local: tuple[str, int] | None) -> str:
    """RabbitMQ's name for a connection: ``peer:port -> local:port``."""
    peer = peer or ("", 0)
    local = local or ("", 0)
    return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"


class NamedConnection:
    """A connection's ``name`` by its ends and ``username`` by its user ("" before its
    login), as listings and events show them: a mixin of the protocols' sessions."""

    peer: tuple[str, int] | None
    local: tuple[str, int] | None
    user: User | None

    @property
    def name(self) -> str:
        """RabbitMQ's name for a connection: ``peer:port -> local:port``."""
        return connection_name(self.peer, self.local)

    @property
    def username(self) -> str:
        return self.user.name if self.user is not None else ""
