"""What the broker tells the world around it: domain events, and the observers that hear
them. Observers (the store, the statistics) are handed to the broker when it is built;
nothing is attached to its objects afterwards."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from enum import Enum, auto
from typing import Any


class Event(Enum):
    """Something changed. The subject each event carries is named beside it."""

    VHOST_ADDED = auto()  # VirtualHost
    VHOST_CHANGED = auto()  # VirtualHost
    VHOST_DELETED = auto()  # VirtualHost
    USER_CHANGED = auto()  # user name: added, changed or deleted
    # what RabbitMQ's user operations tell of (rabbit_auth_backend_internal), each after
    # its USER_CHANGED or LIMITS_CHANGED
    USER_TAGS_SET = auto()  # user name
    USER_PASSWORD_CHANGED = auto()  # user name
    USER_PASSWORD_CLEARED = auto()  # user name
    USER_LIMITS_SET = auto()  # (user name, the limits this operation set)
    USER_LIMITS_CLEARED = auto()  # user name
    TOPIC_PERMISSION_SET = auto()  # TopicPermission: set, changed or not
    TOPIC_PERMISSION_CLEARED = auto()  # (user, vhost, exchange or None for all of them)
    PERMISSION_CHANGED = auto()  # (user, vhost): set or cleared
    TOPIC_PERMISSION_CHANGED = auto()  # (user, vhost): set or cleared
    POLICY_CHANGED = auto()  # VirtualHost: a policy or operator policy set or cleared
    # (Queue, the Policy being set, or None when one was cleared): the queue's policies
    # changed with it; told of before the POLICY_CHANGED
    QUEUE_POLICY_CHANGED = auto()
    LIMITS_CHANGED = auto()  # VirtualHost (vhost limits) or user name (user limits)
    DEFINITIONS_IMPORTED = auto()  # None
    QUEUE_CREATED = auto()  # Queue
    QUEUE_DELETED = auto()  # Queue
    DEFINITION_CHANGED = auto()  # a durable Exchange, Queue or Binding: added or removed
    CONNECTION_OPENED = auto()  # the connection (broker.ports.ConnectionInfo)
    CONNECTION_CLOSED = auto()  # the connection
    CHANNEL_OPENED = auto()  # the channel
    CHANNEL_CLOSED = auto()  # the channel
    QUEUE_DECLARED = auto()  # (vhost, queue name): a declaration (new queue or not)
    EXCHANGE_CREATED = auto()  # Exchange
    # (vhost name, exchange name): an exchange.delete began and ended, whether or not
    # there was such an exchange; RabbitMQ marks the time between with a runtime parameter
    EXCHANGE_DELETE_STARTED = auto()
    EXCHANGE_DELETE_FINISHED = auto()
    # Exchange, or (Exchange, who) when RabbitMQ itself removed it with a queue
    EXCHANGE_DELETED = auto()
    BINDING_CREATED = auto()  # Binding
    BINDING_DELETED = auto()  # Binding, or (Binding, who) when it went with its queue
    CONSUMER_CREATED = auto()  # Consumer
    CONSUMER_DELETED = auto()  # Consumer
    USER_AUTHENTICATED = auto()  # the connection
    USER_AUTHENTICATION_FAILED = auto()  # (the connection, user name, why)
    CONNECTION_AUTHORIZED = auto()  # the connection: into its vhost (connection.open)
    ALARM_SET = auto()  # the resource: "memory" or "disk"
    ALARM_CLEARED = auto()  # the resource


#: Who RabbitMQ names as the remover of what goes with a queue (its bindings, and a source
#: exchange auto-deleted with them).
INTERNAL_USER = "rmq-internal"

#: Who performs what the management API does: set in each request's own task (an AMQP
#: session names its user in ``Broker.actor`` around each method it handles).
API_ACTOR: ContextVar[str] = ContextVar("api_actor", default="")


Observer = Callable[[Event, Any], None]


class Observers:
    """The observers of one broker, told of every event in the order they subscribed."""

    __slots__ = ("_observers",)

    def __init__(self, observers: list[Observer] | None = None) -> None:
        self._observers: list[Observer] = list(observers or [])

    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def emit(self, event: Event, subject: Any = None) -> None:
        for observer in self._observers:
            observer(event, subject)
