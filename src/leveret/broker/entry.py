"""A message as one queue holds it."""

from __future__ import annotations

from leveret.broker.clock import now_ms
from leveret.broker.message import Message

__all__ = ["Entry", "now_ms"]


class Entry:
    """A message in one queue: where it stands, when it expires, how often it went out."""

    __slots__ = (
        "delivery_count",
        "expires_at",
        "message",
        "priority",
        "redelivered",
        "seq",
        "store_id",
    )

    def __init__(self, message: Message, seq: int, expires_at: int = 0) -> None:
        self.message = message
        self.seq = seq
        self.redelivered = False
        self.expires_at = expires_at
        self.delivery_count = 0
        self.store_id = 0
        self.priority = 0  # only a queue with x-max-priority sets it
