"""Server-generated names, as RabbitMQ makes them: a prefix, a dash and 16 random bytes in
unpadded base64url (22 characters)."""

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
