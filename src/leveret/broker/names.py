"""Server-made names, as RabbitMQ makes them: generated ones (a prefix, a dash and 16 random
bytes in unpadded base64url, 22 characters) and a connection's."""

from __future__ import annotations

import base64
import secrets


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
