"""A consumer: a queue subscription on a channel, with its own prefetch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leveret.broker.channel import Channel
    from leveret.broker.queue import Entry, Queue


class Consumer:
    __slots__ = (
        "arguments",
        "channel",
        "exclusive",
        "no_ack",
        "offset",
        "prefetch",
        "priority",
        "queue",
        "tag",
        "tag_wire",
        "unacked",
    )

    def __init__(
        self,
        tag: str,
        queue: Queue,
        channel: Channel,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
        priority: int = 0,
    ) -> None:
        self.tag = tag
        raw = tag.encode()
        self.tag_wire = bytes((len(raw),)) + raw
        self.queue = queue
        self.channel = channel
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.arguments = arguments
        self.priority = priority
        self.unacked = 0
        self.offset = 0  # a stream consumer's next offset

    def has_credit(self) -> bool:
        if self.no_ack:
            return self.channel.writable
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        return self.channel.can_deliver()

    def deliver(self, queue: Queue, entry: Entry) -> None:
        self.channel.deliver(self, queue, entry)
