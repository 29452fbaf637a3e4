"""Queue types behind one interface (:class:`~leveret.broker.queues.base.Queue`), chosen
by ``x-queue-type`` as RabbitMQ does."""

from __future__ import annotations

from typing import Any

from leveret.broker.arguments import text
from leveret.broker.queues.base import (
    Accepted,
    DeadLetters,
    Declaration,
    Overflow,
    Queue,
    QueueHome,
    Subscriber,
)
from leveret.broker.queues.classic import ClassicQueue
from leveret.broker.queues.quorum import QuorumQueue
from leveret.broker.queues.stream import StreamQueue

QUEUE_TYPES: dict[str, type[Queue]] = {
    "classic": ClassicQueue,
    "quorum": QuorumQueue,
    "stream": StreamQueue,
}


def queue_type_name(arguments: dict[str, Any]) -> str:
    """The type a declaration asks for (classic when it names none)."""
    return text(arguments.get("x-queue-type", "classic"))


__all__ = [
    "QUEUE_TYPES",
    "Accepted",
    "ClassicQueue",
    "DeadLetters",
    "Declaration",
    "Overflow",
    "Queue",
    "QueueHome",
    "QuorumQueue",
    "StreamQueue",
    "Subscriber",
    "queue_type_name",
]
