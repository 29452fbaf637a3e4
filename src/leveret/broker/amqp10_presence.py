"""How an AMQP 1.0 connection is present to the rest of the broker: what registers with
it (and so what the limits count, the management API lists and the events tell of), by
the RabbitMQ Leveret behaves as. :func:`shape` is the one place that asks which.

* RabbitMQ 3.10.8 with its rabbitmq_amqp1_0 plugin (:attr:`Shape.PLUGIN`, the default).
  The AMQP 1.0 connection itself is registered nowhere. Each session, at begin, opens a
  *direct* AMQP 0-9-1 connection of its own (amqp_direct_connection: protocol
  ``{'AMQP',"1.0"}``, type direct, the socket's name) and channel 1 on it, in confirm
  mode once a publisher links unsettled, with a ``basic.qos`` of 65535; each link's
  attach opens and closes a disposable channel 2. That direct connection is what
  /api/connections lists, what the vhost and user connection limits count (checked at
  begin: a refusal closes the AMQP 1.0 connection with amqp:unauthorized-access "Access
  for user 'u' was refused: insufficient permissions"), what ``rabbitmqctl`` does not
  list, and what closing it from the management API ends: the session, with
  amqp:internal-error and the Erlang term of its end, the connection staying open. The
  reader tells of its own close (``connection.closed``) for every socket, opened or
  not. Measured on the reference RabbitMQ 3.10.8 with a proton client.
* RabbitMQ 4.2 (:attr:`Shape.NATIVE`): the connection is a network connection of its
  own (rabbit_amqp_reader), registered at open, where the node's, the vhost's and the
  user's connection limits are checked (amqp:resource-limit-exceeded); its sessions are
  no channels. (v4.2.9 rabbit_amqp_reader.erl: handle_connection_frame, check_*_limit.)

The session (:mod:`leveret.broker.amqp10_session`) calls the hooks here at open, begin,
attach, end and close."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from leveret.broker.events import (
    API_ACTOR,
    ChannelClosed,
    ChannelOpened,
    ConnectionAuthorized,
    ConnectionClosed,
    UserAuthenticated,
)
from leveret.broker.ports import ConnectionInfo
from leveret.protocol.amqp10 import definitions as d
from leveret.protocol.spec import TypedTable

if TYPE_CHECKING:
    from leveret.broker.amqp10_common import LinkSession
    from leveret.broker.amqp10_links import ConsumerLink, LinkConsumer
    from leveret.broker.broker import BrokerCore
    from leveret.broker.users import Permission, User
    from leveret.broker.vhost import VirtualHost


class Shape(Enum):
    """Which RabbitMQ's AMQP 1.0 connections Leveret's look like."""

    PLUGIN = "3.10.8"  # rabbitmq_amqp1_0: a direct connection and its channel per session
    NATIVE = "4.2"  # RabbitMQ 4's reader: one network connection, its sessions its own


def shape(broker: BrokerCore) -> Shape:
    """The shape of the broker's AMQP 1.0 connections: RabbitMQ 4.2's when the broker
    behaves as RabbitMQ 4.2 (``broker.compat.v4``, the switch of ``--rabbitmq-version``),
    RabbitMQ 3.10.8's plugin's otherwise. The one place the mode is read for AMQP 1.0
    connections: everything that differs asks this."""
    return Shape.NATIVE if broker.compat.v4 else Shape.PLUGIN


#: the plugin's basic.qos on a session's channel (?MAX_SESSION_WINDOW_SIZE)
PLUGIN_PREFETCH = 65535
#: the TLS items amqp_direct_connection's adapter info adds (maybe_ssl_info), in its
#: order: what a session's direct connection shows and tells of (RabbitMQ 3.10.8)
DIRECT_TLS_KEYS = (
    "ssl_protocol",
    "ssl_key_exchange",
    "ssl_cipher",
    "ssl_hash",
    "peer_cert_issuer",
    "peer_cert_subject",
    "peer_cert_validity",
)


class Owner(ConnectionInfo, Protocol):
    """The AMQP 1.0 connection (:class:`~leveret.broker.amqp10_session.Amqp10Session`),
    as the hooks here see it: a client connection, and what its hooks keep."""

    broker: BrokerCore
    user: User | None
    registered: bool
    local: tuple[str, int] | None
    auth_mechanism: str
    transport_details: dict[str, Any]
    sessions: dict[int, LinkSession]

    def end_session(self, channel: int, error: d.Error) -> None: ...


class BackingChannel:
    """An AMQP 0-9-1 channel of a direct connection (as its observers see a channel)."""

    __slots__ = ("host", "number")

    def __init__(self, host: DirectConnection, number: int) -> None:
        self.host = host
        self.number = number


class DirectConnection:
    """The direct connection RabbitMQ 3.10.8's plugin opens for one AMQP 1.0 session: a
    connection as the broker's registry, limits and observers see one, with channel 1."""

    #: rabbit_mgmt_format's rendering of the adapter's {'AMQP', "1.0"}
    protocol: ClassVar[str] = "AMQP 1.0"
    kind: ClassVar[str] = "direct"

    def __init__(self, owner: Owner, session: LinkSession) -> None:
        self.owner = owner
        self.session = session
        self.id = owner.broker.next_connection_id()
        self.connected_at = int(time.time() * 1000)
        self.channel = BackingChannel(self, 1)
        self.closed = False
        self.server_closed = False  # closed from the broker's side (the management API)

    # ------------------------------------------------------ as others see it
    @property
    def name(self) -> str:
        return self.owner.name  # the socket's (amqp_connection:socket_adapter_info)

    @property
    def peer(self) -> tuple[str, int] | None:
        return self.owner.peer

    @property
    def local(self) -> tuple[str, int] | None:
        return self.owner.local

    @property
    def username(self) -> str:
        user = self.owner.user
        return user.name if user is not None else ""

    @property
    def vhost(self) -> str:
        return self.owner.vhost

    @property
    def transport_details(self) -> dict[str, Any]:
        return self.owner.transport_details

    @property
    def channel_count(self) -> int:
        return 0 if self.closed else 1

    def force_close(self, reason: str) -> None:
        """amqp_direct_connection:server_close(Pid, 320, Reason): the session's channel
        goes down, and the session ends with the reason it went down for, as the plugin's
        session process prints it (``~w``: the text a list of character codes)."""
        if self.closed:
            return
        self.server_closed = True
        codes = ",".join(str(b) for b in reason.encode())
        text = f"{{shutdown,{{connection_closing,{{server_initiated_close,320,[{codes}]}}}}}}"
        self.owner.end_session(self.session.channel, d.Error(d.INTERNAL_ERROR, text))


# the direct connection each consumer's link consumes on (its channel 1), kept beyond
# the session's end: the consumer is told of as deleted after the session has gone
_CONSUMING_ON: weakref.WeakKeyDictionary[ConsumerLink, DirectConnection] = (
    weakref.WeakKeyDictionary()
)


def direct_of(session: LinkSession) -> DirectConnection | None:
    """The direct connection a session runs over (RabbitMQ 3.10.8's shape), if any."""
    direct = session.figures.direct
    return direct if isinstance(direct, DirectConnection) else None


# ----------------------------------------------------------------- the hooks
def vhost_access(owner: Owner, user: User, vhost: str) -> tuple[VirtualHost, Permission] | d.Error:
    """The open's access check (the vhost exists): RabbitMQ 4.2 checks the user's access,
    then the vhost's and the user's connection limits; RabbitMQ 3.10.8's plugin checks
    nothing at open (its sessions' direct connections are checked at begin), Leveret
    the user's access, as before."""
    broker = owner.broker
    v = broker.vhosts[vhost]
    perm = broker.users.permission(user.name, vhost)
    if perm is None:
        return d.Error(d.NOT_ALLOWED, f"access to vhost '{vhost}' refused for user '{user.name}'")
    if shape(broker) is Shape.NATIVE:
        limit = v.limit("max-connections")
        if limit is not None and broker.open_connections(vhost=vhost) >= limit:
            return d.Error(
                d.RESOURCE_LIMIT_EXCEEDED,
                f"access to vhost '{vhost}' refused for user '{user.name}': vhost connection "
                f"limit ({limit}) is reached",
            )
        limit = broker.user_limit(user.name, "max-connections")
        if limit is not None and broker.open_connections(user=user.name) >= limit:
            return d.Error(
                d.RESOURCE_LIMIT_EXCEEDED,
                f"connection refused for user '{user.name}': user connection limit ({limit}) "
                "is reached",
            )
    return v, perm


def forced(reason: str) -> d.Error:
    """Why a registered connection (RabbitMQ 4.2's) is closed by the broker (the
    management API, a vhost's deletion): rabbit_networking:close_connection makes the
    reader terminate, which closes with amqp:internal-error and the reason as ``~tp``
    prints a string (v4.2.9 rabbit_amqp_reader.erl terminate/2; rabbit_mgmt_http_SUITE
    connections_amqp expects ``Connection forced: "Closed via management plugin"``)."""
    quoted = reason.replace("\\", "\\\\").replace('"', '\\"')
    return d.Error(d.INTERNAL_ERROR, f'Connection forced: "{quoted}"')


def opened(owner: Owner) -> bool:
    """The connection is open on its vhost: RabbitMQ 4.2 registers it (and tells of its
    login and of it); the plugin does nothing yet. Whether it registered."""
    if shape(owner.broker) is Shape.PLUGIN:
        return False
    broker = owner.broker
    broker.register(owner)
    broker.observers.emit(UserAuthenticated(owner))
    broker.observers.emit(ConnectionAuthorized(owner))
    return True


def begin(owner: Owner, session: LinkSession) -> d.Error | None:
    """A session begins. RabbitMQ 3.10.8's plugin connects it to the vhost (rabbit_direct:
    connect: the vhost's connection limit, the login, the user's limit, the user's access)
    and opens its channel; a refusal ends the whole connection with this error."""
    if shape(owner.broker) is Shape.NATIVE:
        return None
    broker = owner.broker
    user = owner.user
    assert user is not None
    refused = d.Error(
        d.UNAUTHORIZED_ACCESS,
        f"Access for user '{user.name}' was refused: insufficient permissions",
    )
    v = broker.vhosts.get(owner.vhost)
    if v is None:  # deleted since the open
        return refused
    limit = v.limit("max-connections")
    if limit is not None and broker.open_connections(vhost=v.name) >= limit:
        return refused
    direct = DirectConnection(owner, session)
    broker.observers.emit(UserAuthenticated(direct))
    limit = broker.user_limit(user.name, "max-connections")
    if limit is not None and broker.open_connections(user=user.name) >= limit:
        return refused
    if broker.users.permission(user.name, v.name) is None:
        return refused
    session.figures.direct = direct
    broker.register(direct)
    broker.observers.emit(ConnectionAuthorized(direct))
    broker.observers.emit(ChannelOpened(direct.channel))
    return None


@contextmanager
def attaching(owner: Owner, session: LinkSession, handle: int) -> Iterator[None]:
    """A link attaches: the plugin does it on a disposable channel (2) of the session's
    direct connection, opened for the attach and closed after it; a publisher's link
    attached unsettled puts the session's channel in confirm mode."""
    direct = direct_of(session)
    disposable = BackingChannel(direct, 2) if direct is not None else None
    if disposable is not None:
        owner.broker.observers.emit(ChannelOpened(disposable))
    try:
        yield
    finally:
        if disposable is not None:
            owner.broker.observers.emit(ChannelClosed(disposable))
        link = session.publishers.get(handle)
        if link is not None and not link.settled:
            session.figures.confirm_mode = True
        consumer_link = session.consumers.get(handle)
        if consumer_link is not None and direct is not None:
            _CONSUMING_ON[consumer_link] = direct


@contextmanager
def internally(broker: BrokerCore) -> Iterator[None]:
    """What happens in it is the broker's own doing (``rmq-internal`` in the events), not
    the user's: a session's consumers go with it as its channel goes down."""
    actor, api = broker.actor, API_ACTOR.set("")
    broker.actor = ""
    try:
        yield
    finally:
        broker.actor = actor
        API_ACTOR.reset(api)


def ended(owner: Owner, session: LinkSession) -> None:
    """A session ended: its direct connection closes (its channel first, unless the
    broker closed the connection: then the connection goes first)."""
    direct = direct_of(session)
    if direct is None:
        return
    session.figures.direct = None
    direct.closed = True
    observers = owner.broker.observers
    if direct.server_closed:
        owner.broker.unregister(direct)
        observers.emit(ChannelClosed(direct.channel))
    else:
        observers.emit(ChannelClosed(direct.channel))
        owner.broker.unregister(direct)


def closing(owner: Owner) -> None:
    """The connection goes. Its reader tells of it whatever it got to (rabbit_reader's
    connection_closed, before its sessions' direct connections go), unless it is
    registered: then it is told of as it leaves the registry."""
    if not owner.registered:
        owner.broker.observers.emit(ConnectionClosed(owner))


# ------------------------------------------------------------------ consumers
@dataclass(frozen=True, slots=True)
class ConsumerShape:
    """A consumer's link as the management API and the events show the queue's consumer:
    its tag, prefetch and arguments, and the channel it consumes on (None: a RabbitMQ 4.2
    session, which no channel stands for)."""

    tag: str
    prefetch: int
    arguments: dict[str, Any]
    channel: BackingChannel | None


def _credit_arguments() -> TypedTable:
    """The plugin's basic.consume arguments: x-credit, credit 0 (long), drain false."""
    credit = TypedTable({"credit": 0, "drain": False}, {"credit": "long", "drain": "bool"})
    return TypedTable({"x-credit": credit}, {"x-credit": "table"})


def consumer_shape(consumer: LinkConsumer) -> ConsumerShape:
    """RabbitMQ 3.10.8's plugin consumes on the session's channel 1 with the tag
    ``ctag-`` and the handle as 32 bits, its prefetch the channel's 65535, and x-credit
    (rabbit_amqp1_0_link_util:handle_to_ctag, rabbit_amqp1_0_outgoing_link:attach);
    RabbitMQ 4.2's session with the handle in decimal, in credited mode (prefetch 0), on
    no channel, its arguments those its attach made (``x-priority``, and a stream's
    ``x-stream-offset``, ``x-stream-filter``, ``x-stream-match-unfiltered``) (v4.2.9
    rabbit_amqp_session.erl: handle_to_ctag, parse_attach_properties, parse_filters;
    rabbit_queue_consumers:parse_prefetch_count)."""
    link = consumer.channel
    owner = link.session
    if shape(owner.broker) is Shape.NATIVE:
        return ConsumerShape(str(link.handle), 0, dict(consumer.arguments), None)
    direct = _CONSUMING_ON.get(link)
    tag = "ctag-" + "".join(chr(b) for b in link.handle.to_bytes(4, "big"))
    channel = direct.channel if direct is not None else None
    return ConsumerShape(tag, PLUGIN_PREFETCH, _credit_arguments(), channel)
