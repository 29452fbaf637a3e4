"""Taking what a queue holds with pika, for tests that judge the bodies and their order;
and a queue of the event exchange that holds the events to come."""

from __future__ import annotations

import time
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


def events_from_now(ch: Any) -> str:
    """An exclusive queue bound to every event of ``amq.rabbitmq.event``, emptied of the
    events already on their way (those of the test's own connection, after 0.3 s): its
    name."""
    q: str = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, "amq.rabbitmq.event", "#")
    time.sleep(0.3)
    while ch.basic_get(q, auto_ack=True)[0] is not None:
        pass
    return q
