"""Taking what a queue holds with pika, for tests that judge the bodies and their order."""

from __future__ import annotations

from typing import Any


def drain(ch: Any, queue: str, *, auto_ack: bool = True) -> list[bytes]:
    """The bodies of every message ready in ``queue``, taken one by one with basic.get
    (left unacknowledged on ``ch`` unless ``auto_ack``), until the queue answers get-empty."""
    out = []
    while True:
        method, _, body = ch.basic_get(queue, auto_ack=auto_ack)
        if method is None:
            return out
        out.append(body)
