"""Who performs a broker operation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from leveret.broker import errors as rabbit

if TYPE_CHECKING:
    from leveret.broker.ports import ConnectionInfo
    from leveret.broker.queues import Queue
    from leveret.broker.users import Permission


@dataclass(frozen=True, slots=True)
class Actor:
    """A user with their permissions in the vhost acted on, and the connection they act
    on: an AMQP client's, or None for the management API, which RabbitMQ runs on a
    channel of its own (so every exclusive queue is another connection's to it).

    ``strips_names``: RabbitMQ's channel drops CR and LF from the names an AMQP client
    sends in exchange.declare, exchange.delete, queue.declare, queue.delete and the bind
    methods (rabbit_channel:strip_cr_lf); the management API passes names as given."""

    username: str
    permission: Permission | None
    connection: ConnectionInfo | None = None
    strips_names: bool = False

    def name(self, name: str) -> str:
        """A resource name as this actor's side of RabbitMQ takes it."""
        if self.strips_names and ("\r" in name or "\n" in name):
            return name.replace("\r", "").replace("\n", "")
        return name

    def check_exclusive(self, queue: Queue, vhost: str) -> None:
        """An exclusive queue is its owner's alone: another connection (and the
        management API, which has none) finds it locked."""
        owner = queue.exclusive_owner
        if owner is not None and owner is not self.connection:
            raise rabbit.exclusive_locked(queue.name, vhost)
