"""A consumer: a queue subscription on a channel, with its own prefetch. Its queue sees
it as a :class:`~leveret.broker.queues.base.Subscriber`; it sees its channel as a
:class:`DeliveryTarget`."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from leveret.broker.entry import Entry
    from leveret.broker.ports import ConnectionInfo, FlowHolder
    from leveret.broker.queues.base import Queue

UNLIMITED = 1 << 30


class DeliveryTarget(Protocol):
    """The channel a consumer delivers on."""

    number: int
    closed: bool
    global_prefetch: int  # basic.qos global=true; 0: none

    @property
    def host(self) -> FlowHolder:
        """The connection it is on (whose socket may be full)."""
        ...

    @property
    def holder(self) -> FlowHolder: ...

    @property
    def connection(self) -> ConnectionInfo: ...

    @property
    def writable(self) -> bool: ...

    def can_deliver(self) -> bool: ...

    def credit(self) -> int:
        """How many more deliveries the channel takes now (its global prefetch)."""
        ...

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None: ...

    def consumer_cancelled_by_server(self, consumer: Consumer) -> None: ...


class Consumer:
    __slots__ = (
        "arguments",
        "channel",
        "deliver",
        "exclusive",
        "no_ack",
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
        channel: DeliveryTarget,
        no_ack: bool,
        exclusive: bool,
        prefetch: int,
        arguments: dict[str, Any],
        priority: int = 0,
    ) -> None:
        self.tag = tag
        raw = tag.encode()
        self.tag_wire = bytes((len(raw),)) + raw  # as a short string, for deliveries
        self.queue = queue
        self.channel = channel
        self.no_ack = no_ack
        self.exclusive = exclusive
        self.prefetch = prefetch
        self.arguments = arguments
        self.priority = priority
        self.unacked = 0
        # deliver(queue, entry): the channel's, bound to this consumer once (the hot path
        # saves a call per delivery)
        self.deliver: Callable[[Queue, Entry], None] = partial(channel.deliver, self)

    #: a stream's entries as AMQP 0-9-1 messages (an AMQP 1.0 link's consumer: as stored)
    reads_stored = False

    @property
    def holder(self) -> FlowHolder:
        return self.channel.holder

    def has_credit(self) -> bool:
        # the hot path: the channel's ``writable`` read without its property's call, and
        # ``can_deliver`` called only when a global prefetch limits the channel
        channel = self.channel
        if self.no_ack:
            return channel.host.writable and not channel.closed
        if self.prefetch and self.unacked >= self.prefetch:
            return False
        if channel.global_prefetch:
            return channel.can_deliver()
        return channel.host.writable and not channel.closed

    def credit(self) -> int:
        if self.no_ack:
            return UNLIMITED if self.channel.writable else 0
        own = self.prefetch - self.unacked if self.prefetch else UNLIMITED
        return min(own, self.channel.credit())

    def cancelled(self) -> None:
        self.channel.consumer_cancelled_by_server(self)
