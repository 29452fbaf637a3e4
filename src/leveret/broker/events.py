"""What the broker tells the world around it: domain events, and the observers that hear
them. Observers (the store, the statistics) are handed to the broker when it is built;
nothing is attached to its objects afterwards.

Each event is a frozen dataclass whose fields name what it carries; events of one family
(the same payload) share a base class, and an observer tells them apart by their class
(a table of handlers by class, or ``match``). What the broker's own modules would import back (a
vhost, a channel, a connection) is seen through a Protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from leveret.broker.consumer import Consumer
    from leveret.broker.exchanges.base import Binding, Exchange
    from leveret.broker.policies import Policies, Policy
    from leveret.broker.ports import ConnectionInfo
    from leveret.broker.queues.base import Queue
    from leveret.broker.users import TopicPermission


#: Who RabbitMQ names as the remover of what goes with a queue (its bindings, and a source
#: exchange auto-deleted with them).
INTERNAL_USER = "rmq-internal"

#: Who performs what the management API does: set in each request's own task (an AMQP
#: session names its user in ``Broker.actor`` around each method it handles).
API_ACTOR: ContextVar[str] = ContextVar("api_actor", default="")


# ------------------------------------------------------------ what events carry
class VhostInfo(Protocol):
    """A virtual host as its observers see it (:class:`~leveret.broker.vhost.VirtualHost`)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def tags(self) -> list[str]: ...

    @property
    def tracing(self) -> bool: ...

    @property
    def exchanges(self) -> dict[str, Exchange]: ...

    @property
    def limits(self) -> dict[str, int]: ...

    @property
    def policies(self) -> Policies: ...

    def add_builtin_exchange(self, name: str, type_name: str, internal: bool) -> Exchange: ...


class ChannelInfo(Protocol):
    """An AMQP channel as its observers see it (:class:`~leveret.broker.channel.Channel`):
    its number on the connection it is on."""

    @property
    def number(self) -> int: ...

    @property
    def host(self) -> ConnectionInfo: ...


# ------------------------------------------------------------------- the events
@dataclass(frozen=True, slots=True)
class BrokerEvent:
    """Something changed (the base of every event; never emitted itself)."""


# virtual hosts
@dataclass(frozen=True, slots=True)
class VhostEvent(BrokerEvent):
    vhost: VhostInfo


@dataclass(frozen=True, slots=True)
class VhostAdded(VhostEvent):
    pass


@dataclass(frozen=True, slots=True)
class VhostChanged(VhostEvent):
    pass


@dataclass(frozen=True, slots=True)
class VhostDeleted(VhostEvent):
    pass


@dataclass(frozen=True, slots=True)
class PolicyChanged(VhostEvent):
    """A policy or operator policy of the vhost was set or cleared."""


@dataclass(frozen=True, slots=True)
class VhostLimitsChanged(VhostEvent):
    pass


@dataclass(frozen=True, slots=True)
class QueuePolicyChanged(BrokerEvent):
    """The queue's policies changed with the policy being set (``policy``), or with one
    cleared (None); told of before the :class:`PolicyChanged`."""

    queue: Queue
    policy: Policy | None


# users: by name. UserChanged tells of a user added, changed or deleted; the others are
# what RabbitMQ's user operations tell of (rabbit_auth_backend_internal), each after its
# UserChanged or UserLimitsChanged.
@dataclass(frozen=True, slots=True)
class UserEvent(BrokerEvent):
    user: str


@dataclass(frozen=True, slots=True)
class UserChanged(UserEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserTagsSet(UserEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserPasswordChanged(UserEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserPasswordCleared(UserEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserLimitsChanged(UserEvent):
    """The user's limits as a whole were replaced."""


@dataclass(frozen=True, slots=True)
class UserLimitsCleared(UserEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserLimitsSet(BrokerEvent):
    """The limits this operation set (not all the user's)."""

    user: str
    limits: Mapping[str, int]


# permissions: a user's in a vhost, set or cleared
@dataclass(frozen=True, slots=True)
class PermissionEvent(BrokerEvent):
    user: str
    vhost: str


@dataclass(frozen=True, slots=True)
class PermissionChanged(PermissionEvent):
    pass


@dataclass(frozen=True, slots=True)
class TopicPermissionChanged(PermissionEvent):
    pass


@dataclass(frozen=True, slots=True)
class TopicPermissionSet(BrokerEvent):
    """Told of whether or not it changed."""

    permission: TopicPermission


@dataclass(frozen=True, slots=True)
class TopicPermissionCleared(BrokerEvent):
    user: str
    vhost: str
    exchange: str | None  # None: those of all exchanges


# definitions
@dataclass(frozen=True, slots=True)
class DefinitionChanged(BrokerEvent):
    """A durable exchange, queue or binding was added or removed."""

    definition: Exchange | Queue | Binding


@dataclass(frozen=True, slots=True)
class DefinitionsImported(BrokerEvent):
    pass


# queues
@dataclass(frozen=True, slots=True)
class QueueEvent(BrokerEvent):
    queue: Queue


@dataclass(frozen=True, slots=True)
class QueueCreated(QueueEvent):
    pass


@dataclass(frozen=True, slots=True)
class QueueDeleted(QueueEvent):
    pass


@dataclass(frozen=True, slots=True)
class QueueDeclared(BrokerEvent):
    """A declaration, of a new queue or not."""

    vhost: str
    queue: str


# exchanges and bindings
@dataclass(frozen=True, slots=True)
class ExchangeCreated(BrokerEvent):
    exchange: Exchange


@dataclass(frozen=True, slots=True)
class ExchangeDeleted(BrokerEvent):
    exchange: Exchange
    who: str | None = None  # who removed it when not the actor (RabbitMQ, with a queue)


@dataclass(frozen=True, slots=True)
class ExchangeDeleteMarker(BrokerEvent):
    """An exchange.delete began or ended, whether or not there was such an exchange;
    RabbitMQ marks the time between with a runtime parameter."""

    vhost: str
    exchange: str


@dataclass(frozen=True, slots=True)
class ExchangeDeleteStarted(ExchangeDeleteMarker):
    pass


@dataclass(frozen=True, slots=True)
class ExchangeDeleteFinished(ExchangeDeleteMarker):
    pass


@dataclass(frozen=True, slots=True)
class BindingCreated(BrokerEvent):
    binding: Binding


@dataclass(frozen=True, slots=True)
class BindingDeleted(BrokerEvent):
    binding: Binding
    who: str | None = None  # who removed it when not the actor (RabbitMQ, with a queue)


# consumers
@dataclass(frozen=True, slots=True)
class ConsumerEvent(BrokerEvent):
    consumer: Consumer


@dataclass(frozen=True, slots=True)
class ConsumerCreated(ConsumerEvent):
    pass


@dataclass(frozen=True, slots=True)
class ConsumerDeleted(ConsumerEvent):
    pass


# connections and channels
@dataclass(frozen=True, slots=True)
class ConnectionEvent(BrokerEvent):
    connection: ConnectionInfo


@dataclass(frozen=True, slots=True)
class ConnectionOpened(ConnectionEvent):
    """Registered with the broker."""


@dataclass(frozen=True, slots=True)
class ConnectionClosed(ConnectionEvent):
    pass


@dataclass(frozen=True, slots=True)
class UserAuthenticated(ConnectionEvent):
    pass


@dataclass(frozen=True, slots=True)
class ConnectionAuthorized(ConnectionEvent):
    """Let into its vhost (connection.open)."""


@dataclass(frozen=True, slots=True)
class UserAuthenticationFailed(BrokerEvent):
    connection: ConnectionInfo
    user: str | None  # None when the mechanism named no one
    why: str


@dataclass(frozen=True, slots=True)
class ChannelEvent(BrokerEvent):
    channel: ChannelInfo


@dataclass(frozen=True, slots=True)
class ChannelOpened(ChannelEvent):
    pass


@dataclass(frozen=True, slots=True)
class ChannelClosed(ChannelEvent):
    pass


# resource alarms: "memory" or "disk"
@dataclass(frozen=True, slots=True)
class AlarmEvent(BrokerEvent):
    resource: str


@dataclass(frozen=True, slots=True)
class AlarmSet(AlarmEvent):
    pass


@dataclass(frozen=True, slots=True)
class AlarmCleared(AlarmEvent):
    pass


# ------------------------------------------------------------------ observers
Observer = Callable[[BrokerEvent], None]


class Observers:
    """The observers of one broker, told of every event in the order they subscribed."""

    __slots__ = ("_observers",)

    def __init__(self, observers: list[Observer] | None = None) -> None:
        self._observers: list[Observer] = list(observers or [])

    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def emit(self, event: BrokerEvent) -> None:
        for observer in self._observers:
            observer(event)
