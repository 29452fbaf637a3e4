"""queue.bind, queue.unbind, exchange.bind and exchange.unbind (and the management
API's bindings), as rabbit_channel:binding_action orders its checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leveret.broker.exchanges import Binding
from leveret.broker.operations import authorization
from leveret.broker.operations.topics import authorize_topic

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.operations.actor import Actor
    from leveret.broker.queues import Queue
    from leveret.broker.vhost import VirtualHost


@dataclass(frozen=True, slots=True)
class BindingRequest:
    """What a bind or unbind names: the source exchange, the destination ("queue" or
    "exchange", and its name), the routing key and the arguments."""

    source: str
    dest_kind: str
    destination: str
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


def bind(vhost: VirtualHost, actor: Actor, request: BindingRequest) -> bool:
    """Whether the binding is new."""
    return _binding_action(vhost, actor, True, request)


def unbind(vhost: VirtualHost, actor: Actor, request: BindingRequest) -> bool:
    """Whether there was such a binding. As RabbitMQ 3.10 (rabbit_binding:remove,
    absent_errs_only), unbinding from or to something that does not exist succeeds."""
    return _binding_action(vhost, actor, False, request)


def _binding_action(vhost: VirtualHost, actor: Actor, add: bool, request: BindingRequest) -> bool:
    source, destination = actor.name(request.source), actor.name(request.destination)
    dest_kind, routing_key, arguments = request.dest_kind, request.routing_key, request.arguments
    authorization.binding(vhost, actor, source, dest_kind, destination)
    topic = vhost.exchanges.get(source)
    if topic is not None and vhost.topic_permissions:
        authorize_topic(vhost, topic, actor.username, routing_key, "read")
    if not add and (
        source not in vhost.exchanges
        or destination not in (vhost.queues if dest_kind == "queue" else vhost.exchanges)
    ):
        return False
    src = vhost.get_exchange(source)
    dest: Queue | Exchange
    if dest_kind == "queue":
        dest = vhost.get_queue(destination)
        actor.check_exclusive(dest, vhost.name)
    else:
        dest = vhost.get_exchange(destination)
    binding = Binding(src.name, dest, routing_key, arguments.copy() if arguments else {})
    return vhost.bind(src, binding) if add else vhost.unbind(src, binding)
