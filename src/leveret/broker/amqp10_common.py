"""What the parts of an AMQP 1.0 connection's view of the broker share
(:mod:`leveret.broker.amqp10_session` puts them together): RabbitMQ 4.2's limits, its error
conditions for the broker's operations, one session's links, and the state the publishing
and consuming halves read.

The halves are mixins of :class:`Amqp10Base`, each in a module of its own
(:mod:`leveret.broker.amqp10_publishing`, :mod:`leveret.broker.amqp10_consuming`); the
connection-level half (SASL, open, sessions, flow control) is the session module's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from leveret.broker.amqp10_links import ConsumerLink, PublisherLink
from leveret.broker.broker import BrokerCore
from leveret.broker.entry import Entry
from leveret.broker.operations import Actor
from leveret.broker.ports import ConnectionInfo, Endpoint, FlowHolder
from leveret.broker.queues import Queue
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol import spec
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.amqp10.server import ServerConnection
from leveret.protocol.errors import AMQPError

#: RabbitMQ 4.2's session incoming window, and when it is opened again
INCOMING_WINDOW = 400
#: the highest link handle a session takes (RabbitMQ 4.2's link_max_per_session - 1)
HANDLE_MAX = 255
#: sessions per connection (session_max_per_connection 64: channel-max 63)
CHANNEL_MAX = 63
#: the capabilities RabbitMQ 4's open offers
CAPABILITIES = ("LINK_PAIR_V1_0", "ANONYMOUS-RELAY")
#: the AMQP error codes of the broker's operations, as AMQP 1.0 conditions
_CONDITIONS = {
    spec.ACCESS_REFUSED: d.UNAUTHORIZED_ACCESS,
    spec.NOT_FOUND: d.NOT_FOUND,
    spec.RESOURCE_LOCKED: d.RESOURCE_LOCKED,
    spec.PRECONDITION_FAILED: d.PRECONDITION_FAILED,
    spec.NOT_ALLOWED: d.NOT_ALLOWED,
}


def condition(error: AMQPError) -> d.Error:
    """An operation's AMQP 0-9-1 error as an AMQP 1.0 one: the condition of its code,
    its text without the ``NOT_FOUND - `` prefix."""
    text = error.reply_text
    _, sep, rest = text.partition(" - ")
    return d.Error(_CONDITIONS.get(error.code, d.INTERNAL_ERROR), rest if sep else text)


class LinkError(Exception):
    """A link is refused or fails: it is detached with ``error``."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


class Amqp10Edge(Protocol):
    """The server's side of an AMQP 1.0 client's socket, as its session sees it."""

    def schedule(self) -> None:
        """Output waits in the connection: flush it at the end of this turn."""
        ...

    def start_heartbeats(self, interval: int, send_every: float | None = None) -> None: ...

    def opened(self) -> None: ...

    def force_close(self, reason: str) -> None: ...

    def released(self) -> None:
        """Credit flow let go of this publisher: its socket is read again."""
        ...


Amqp10Endpoint = Endpoint[ServerConnection, Amqp10Edge]


@dataclass(eq=False)
class LinkSession:
    """One AMQP 1.0 session: its links by handle, and what it sent unsettled."""

    channel: int
    publishers: dict[int, PublisherLink] = field(default_factory=dict)
    consumers: dict[int, ConsumerLink] = field(default_factory=dict)
    # delivery-id -> (link, queue, entry) of what a consumer has not settled
    unsettled: dict[int, tuple[ConsumerLink, Queue, Entry]] = field(default_factory=dict)
    # delivery-ids of publishes to confirm once they are on disk
    confirms: list[int] = field(default_factory=list)
    received: int = 0  # transfers since the incoming window was last opened


class Amqp10Base:
    """The state an AMQP 1.0 connection's halves share (set by the session)."""

    broker: BrokerCore
    endpoint: Amqp10Endpoint
    conn: ServerConnection
    sessions: dict[int, LinkSession]
    user: User | None
    permission: Permission | None
    vhost: str
    vhost_obj: VirtualHost | None
    blocked: bool
    needs_sync: bool
    writable: bool

    @property
    def info(self) -> ConnectionInfo:
        """The connection as the broker's listings and checks see it (the session)."""
        return cast("ConnectionInfo", self)

    @property
    def flow_holder(self) -> FlowHolder:
        """The connection as credit flow holds it (the session)."""
        return cast("FlowHolder", self)

    @property
    def actor(self) -> Actor:
        assert self.user is not None
        return Actor(self.user.name, self.permission, self.info)

    def _refuse_attach(self, channel: int, handle: int, attach: Any, error: d.Error) -> None:
        """As RabbitMQ: an attach with a null terminus on our side, then the detach."""
        self.conn.send_attach(
            channel,
            handle,
            source=attach.source if attach.role else None,
            target=None if attach.role else attach.target,
        )
        self.conn.send_detach(channel, handle, True, error)
