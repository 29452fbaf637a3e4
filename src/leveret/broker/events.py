"""What the broker tells the world around it: domain events, and the observers that hear
them. Observers (the store, the statistics) are handed to the broker when it is built;
nothing is attached to its objects afterwards.

Each event is a frozen dataclass whose fields name what it carries; events of one family
(the same payload) share a base class, and an observer tells them apart by their class
(a table of handlers by class, or ``match``). An event that carries no more than its family
is one line, ``class VhostAdded(VhostEvent): ...``: a frozen slotted dataclass all the same,
by its family's decorator and :class:`_Slotted`. What the broker's own modules would import
back (a vhost, a channel, a connection) is seen through a Protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

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
class _Slotted(type):
    """Gives a class that declares no fields (and no slots) empty ``__slots__``: an event
    without fields of its own stays slotted with no decorator. A class with fields gets its
    slots from ``dataclass(slots=True)``, which refuses a class that has them already."""

    def __new__(mcs, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> _Slotted:
        if "__slots__" not in ns and not ns.get("__annotations__"):
            ns["__slots__"] = ()
        return super().__new__(mcs, name, bases, ns)


@dataclass(frozen=True)  # slotted by _Slotted (it has no fields)
class BrokerEvent(metaclass=_Slotted):
    """Something changed (the base of every event; never emitted itself)."""


# virtual hosts
@dataclass(frozen=True, slots=True)
class VhostEvent(BrokerEvent):
    vhost: VhostInfo


class VhostAdded(VhostEvent): ...


class VhostChanged(VhostEvent): ...


class VhostDeleted(VhostEvent): ...


class PolicyChanged(VhostEvent): ...  # a policy or operator policy of the vhost was set or cleared


class VhostLimitsChanged(VhostEvent): ...


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


class UserChanged(UserEvent): ...


class UserTagsSet(UserEvent): ...


class UserPasswordChanged(UserEvent): ...


class UserPasswordCleared(UserEvent): ...


class UserLimitsChanged(UserEvent): ...  # the user's limits as a whole were replaced


class UserLimitsCleared(UserEvent): ...


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


class PermissionChanged(PermissionEvent): ...


class TopicPermissionChanged(PermissionEvent): ...


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


class DefinitionsImported(BrokerEvent): ...


# global runtime parameters (cluster_name, internal_cluster_id, and any other name)
@dataclass(frozen=True, slots=True)
class GlobalParameterEvent(BrokerEvent):
    name: str
    user: str  # who set or cleared it (user_who_performed_action)


@dataclass(frozen=True, slots=True)
class GlobalParameterSet(GlobalParameterEvent):
    """Told of whether or not the value changed (rabbit_runtime_parameters:set_global)."""

    value: Any


class GlobalParameterCleared(GlobalParameterEvent): ...


# queues
@dataclass(frozen=True, slots=True)
class QueueEvent(BrokerEvent):
    queue: Queue


class QueueCreated(QueueEvent): ...


class QueueDeleted(QueueEvent): ...


@dataclass(frozen=True, slots=True)
class QueueDeclared(BrokerEvent):
    """A declaration, of a new queue or not, once the declarer may configure it
    (rabbit_core_metrics:queue_declared: a channel's or the management API's
    queue.declare, not a passive one; RabbitMQ 4's AMQP 1.0 declarations too)."""

    vhost: str
    queue: str


@dataclass(frozen=True, slots=True)
class QueueDeclaredNew(BrokerEvent):
    """A declaration that made its queue (rabbit_core_metrics:queue_created). A queue
    made otherwise (a definitions import, the stream protocol's create, a recovery) is
    a :class:`QueueCreated` without it, as RabbitMQ counts only declarations."""

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


class ExchangeDeleteStarted(ExchangeDeleteMarker): ...


class ExchangeDeleteFinished(ExchangeDeleteMarker): ...


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


class ConsumerCreated(ConsumerEvent): ...


class ConsumerDeleted(ConsumerEvent): ...


# connections and channels
@dataclass(frozen=True, slots=True)
class ConnectionEvent(BrokerEvent):
    connection: ConnectionInfo


class ConnectionOpened(ConnectionEvent): ...  # registered with the broker


class ConnectionClosed(ConnectionEvent): ...


class UserAuthenticated(ConnectionEvent): ...


class ConnectionAuthorized(ConnectionEvent): ...  # let into its vhost (connection.open)


@dataclass(frozen=True, slots=True)
class UserAuthenticationFailed(BrokerEvent):
    connection: ConnectionInfo
    user: str | None  # None when the mechanism named no one
    why: str


@dataclass(frozen=True, slots=True)
class ChannelEvent(BrokerEvent):
    channel: ChannelInfo


class ChannelOpened(ChannelEvent): ...


class ChannelClosed(ChannelEvent): ...


# resource alarms: "memory" or "disk"
@dataclass(frozen=True, slots=True)
class AlarmEvent(BrokerEvent):
    resource: str


class AlarmSet(AlarmEvent): ...


class AlarmCleared(AlarmEvent): ...


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
