"""The links of an AMQP 1.0 session, as RabbitMQ 4.2's rabbit_amqp_session keeps them: a
publisher's (the client sends, we receive into an exchange) and a consumer's (we send from
a queue, as the client's link credit allows).

A consumer's link is a :class:`~leveret.broker.consumer.DeliveryTarget` to the queue, the
place an AMQP 0-9-1 channel holds: the queue hands it entries while the link has credit,
it sends each as a transfer and keeps the unsettled ones by delivery-id until the client's
disposition settles them."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.broker.consumer import Consumer

if TYPE_CHECKING:
    from leveret.broker.entry import Entry
    from leveret.broker.exchanges import Exchange
    from leveret.broker.message import Message
    from leveret.broker.ports import ConnectionInfo, FlowHolder
    from leveret.broker.queues import Queue

#: the credit a publisher's link gets, and gets again once half is used (RabbitMQ 4.2's
#: max_link_credit)
MAX_LINK_CREDIT = 170
_TAG = struct.Struct(">Q")


@dataclass(eq=False, slots=True)
class PublisherLink:
    """The client sends on it: where its messages go, and its credit."""

    channel: int
    handle: int
    name: str
    address: str | None
    exchange: Exchange | None  # None: the anonymous terminus (each message's ``to``)
    routing_key: object  # a key, or amqp10_addresses.SUBJECT
    settled: bool  # snd-settle-mode settled: no outcome is sent
    max_message_size: int
    credit: int = MAX_LINK_CREDIT
    published: int = 0


class LinkConsumer(Consumer):
    """A queue subscription whose credit is an AMQP 1.0 link's, not a prefetch."""

    __slots__ = ()

    channel: ConsumerLink
    reads_stored = True  # a stream's entries go out as stored, with their annotations

    def has_credit(self) -> bool:
        return self.channel.can_deliver()

    def credit(self) -> int:
        return self.channel.credit()


@dataclass(eq=False)
class ConsumerLink:
    """The client receives on it, from ``queue``; ``credit`` is what it may still be sent,
    as its flows grant it (the protocol's count: the link's own)."""

    session: Any  # the Amqp10Session it is on (its sender, and its writability)
    channel: int
    handle: int
    name: str
    address: str
    queue: Queue
    settled: bool  # snd-settle-mode settled: consumed without acknowledgement
    max_message_size: int = 0  # the client's, for what it receives (0: no limit)
    dynamic: bool = False  # a temporary queue of its own, deleted when it goes
    consumer: LinkConsumer | None = None
    closed: bool = False
    #: a credit-limited target: queues ask ``can_deliver`` of it
    global_prefetch: int = 1
    delivered: int = 0
    # a bound queue of the link's own (a v1 /exchange/ source), deleted with the link
    own_queue: bool = False
    next_tag: int = field(default=1)
    number: int = 0  # the handle, where a channel has its number
    # the filters in place, as the management API lists a link's (its sessions' page)
    filters: tuple[dict[str, Any], ...] = ()
    # deliveries wait until the client has read the attach reply (``_warm_up``)
    held: bool = True
    attach_written: bool = False
    held_flow: Any = None  # a flow that came while held, answered once the link warms up

    def __post_init__(self) -> None:
        self.number = self.handle

    # -- the DeliveryTarget port --------------------------------------------------
    @property
    def host(self) -> FlowHolder:
        return self.session  # type: ignore[no-any-return]

    @property
    def holder(self) -> FlowHolder:
        return self.session  # type: ignore[no-any-return]

    @property
    def connection(self) -> ConnectionInfo:
        return self.session  # type: ignore[no-any-return]

    @property
    def writable(self) -> bool:
        return bool(self.session.writable) and not self.closed

    def link_credit(self) -> int:
        return int(self.session.link_credit(self.channel, self.handle))

    def can_deliver(self) -> bool:
        return self.writable and not self.held and self.link_credit() > 0

    def credit(self) -> int:
        return self.link_credit() if self.writable and not self.held else 0

    def deliver(self, consumer: Consumer, queue: Queue, entry: Entry) -> None:
        tag = self.next_tag
        self.next_tag = tag + 1
        self.delivered += 1
        self.session.send_delivery(self, consumer, queue, entry, _TAG.pack(tag))

    def consumer_cancelled_by_server(self, consumer: Consumer) -> None:
        """The queue went away: the link is detached, as RabbitMQ's session detaches it."""
        self.session.queue_gone(self)


@dataclass(eq=False)
class VolatileLink:
    """A link reading a volatile queue (RabbitMQ 4.2's direct reply-to over AMQP 1.0):
    a reply consumer of the broker's direct reply-to, by the address ``suffix`` it was
    given; replies go out settled while it has credit, and are dropped without."""

    session: Any  # the Amqp10Session it is on
    channel: int
    handle: int
    suffix: str = ""
    closed: bool = False
    dropped: int = 0
    tag: int = 0

    def next_tag(self) -> bytes:
        self.tag += 1
        return _TAG.pack(self.tag)

    def deliver_reply(self, message: Message) -> None:
        self.session.send_reply(self, message)
