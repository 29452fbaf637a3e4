"""What the parts of an AMQP 1.0 connection's view of the broker share
(:mod:`leveret.broker.amqp10_session` puts them together): RabbitMQ 4.2's limits, its error
conditions for the broker's operations, one session's links, and the state the publishing
and consuming halves read.

The halves are mixins of :class:`Amqp10Base`, each in a module of its own
(:mod:`leveret.broker.amqp10_publishing`, :mod:`leveret.broker.amqp10_consuming`); the
connection-level half (SASL, open, sessions, flow control) is the session module's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from leveret.broker import operations
from leveret.broker.amqp10_addresses import BadAddress
from leveret.broker.amqp10_figures import SessionFigures
from leveret.broker.amqp10_links import ConsumerLink, PublisherLink, VolatileLink
from leveret.broker.broker import BrokerCore
from leveret.broker.entry import Entry
from leveret.broker.events import QueueDeclared, QueueDeclaredNew
from leveret.broker.limits import check_queue_limit
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
#: how long RabbitMQ 4.2 waits before it closes a connection refused at its open, without
#: a close frame (rabbit_amqp_reader.hrl's SILENT_CLOSE_DELAY)
SILENT_CLOSE_DELAY = 3.0
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


def refusal(exc: BadAddress | AMQPError | LinkError) -> d.Error:
    """Why an attach is refused, from what refused it: an address RabbitMQ refuses, a
    broker operation's error, or the link's own."""
    return condition(exc) if isinstance(exc, AMQPError) else exc.error


class SessionError(Exception):
    """A frame the session cannot go on after (RabbitMQ's protocol_error in a session
    process): the session is ended with ``error``."""

    def __init__(self, error: d.Error) -> None:
        super().__init__(error.description)
        self.error = error


class Amqp10Edge(Protocol):
    """The server's side of an AMQP 1.0 client's socket, as its session sees it."""

    def schedule(self) -> None:
        """Output waits in the connection: flush it at the end of this turn."""
        ...

    def start_heartbeats(self, interval: int, send_every: float | None = None) -> None: ...

    def after_flush(self, callback: Callable[[], None]) -> None:
        """Write what waits now, and run ``callback`` on a later turn of the loop."""
        ...

    def later(self, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` in ``delay`` seconds (it checks whether it still matters)."""
        ...

    def opened(self) -> None: ...

    def force_close(self, reason: str) -> None: ...

    def released(self) -> None:
        """Credit flow let go of this publisher: its socket is read again."""
        ...

    def close_silently(self, delay: float) -> None:
        """End the socket after ``delay`` seconds without a close (RabbitMQ's
        silent_close_delay), reading nothing more."""
        ...


Amqp10Endpoint = Endpoint[ServerConnection, Amqp10Edge]


@dataclass(eq=False)
class LinkSession:
    """One AMQP 1.0 session: its links by handle, and what it sent unsettled."""

    channel: int
    publishers: dict[int, PublisherLink] = field(default_factory=dict)
    consumers: dict[int, ConsumerLink] = field(default_factory=dict)
    volatile: dict[int, VolatileLink] = field(default_factory=dict)
    # delivery-id -> (link, queue, entry) of what a consumer has not settled
    unsettled: dict[int, tuple[ConsumerLink, Queue, Entry]] = field(default_factory=dict)
    # delivery-ids of publishes to confirm once they are on disk
    confirms: list[int] = field(default_factory=list)
    # those of earlier batches, waiting for the fsync of their generation (group commit)
    waiting: list[tuple[int, list[int]]] = field(default_factory=list)
    waiting_count: int = 0
    received: int = 0  # transfers since the incoming window was last opened
    # what it did, and how the broker sees it (leveret.broker.amqp10_presence)
    figures: SessionFigures = field(default_factory=SessionFigures)


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
    container_id: str
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

    def _refuse_attach(
        self,
        channel: int,
        handle: int,
        attach: Any,
        error: d.Error | BadAddress | AMQPError | LinkError,
    ) -> None:
        """As RabbitMQ 4.2 (its figure 2.33): an attach whose terminus on our side is
        null (the client's echoed), then the detach with ``error`` (or what refused it:
        an address, a broker operation's error or the link's own)."""
        if not isinstance(error, d.Error):
            error = refusal(error)
        receives = bool(attach.role)  # the client receives: we are the sender
        self.conn.send_attach(
            channel,
            handle,
            source=None if receives else attach.source,
            target=attach.target if receives else None,
            snd_settle_mode=attach.snd_settle_mode,
            rcv_settle_mode=attach.rcv_settle_mode,
            initial_delivery_count=0 if receives else None,
        )
        self.conn.send_detach(channel, handle, True, error)

    @staticmethod
    def _check_queue_limit(vhost: VirtualHost, name: str) -> None:
        """The vhost's queue limit: a LinkError (resource-limit-exceeded) when reached."""
        try:
            check_queue_limit(vhost, name)
        except AMQPError as exc:
            raise LinkError(
                d.Error(d.RESOURCE_LIMIT_EXCEEDED, condition(exc).description)
            ) from None

    def _declare_v1(self, name: str, durable: bool) -> None:
        """declare_queue_v1: configure permission, the vhost's queue limit, then a
        classic queue (an existing one as it is)."""
        vhost = self.vhost_obj
        assert vhost is not None
        operations.check_access(vhost, self.actor, "configure", "queue", name)
        # counted as rabbit_amqp_session:declare_queue counts (as a channel's declaration)
        vhost.observers.emit(QueueDeclared(vhost.name, name))
        if name in vhost.queues:
            return
        self._check_queue_limit(vhost, name)
        _, created = vhost.declare_queue(name, durable, None, False, {})
        if created:
            vhost.observers.emit(QueueDeclaredNew(vhost.name, name))
