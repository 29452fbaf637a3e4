"""Server-made names, as RabbitMQ makes them: generated ones (a prefix, a dash and 16 random
bytes in unpadded base64url, 22 characters) and a connection's."""

from __future__ import annotations

import base64
import secrets
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from leveret.broker.ports import Traffic
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
    id: int
    connected_at: int  # ms since the epoch
    auth_mechanism: str
    traffic: Traffic | None

    def connected(
        self,
        connection_id: int,
        peer: tuple[str, int] | None,
        local: tuple[str, int] | None,
        traffic: Traffic | None,
    ) -> None:
        """What a session knows once its socket is accepted: its number (the broker's
        next), its ends, the socket's figures (when there is a socket) and when; nobody
        logged in yet. (An AMQP 0-9-1 session is numbered at its start-ok instead, or at
        its end if it never got there.)"""
        self.id = connection_id
        self.peer = peer
        self.local = local
        self.traffic = traffic
        self.connected_at = int(time.time() * 1000)
        self.auth_mechanism = ""
        self.user = None

    @property
    def name(self) -> str:
        """RabbitMQ's name for a connection: ``peer:port -> local:port``."""
        return connection_name(self.peer, self.local)

    @property
    def username(self) -> str:
        return self.user.name if self.user is not None else ""
