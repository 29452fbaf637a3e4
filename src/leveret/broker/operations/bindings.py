"""queue.bind, queue.unbind, exchange.bind and exchange.unbind (and the management
API's bindings), as rabbit_channel:binding_action orders its checks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker.operations import authorization
from leveret.broker.operations.topics import authorize_topic

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.operations.actor import Actor
    from leveret.broker.queues import Queue
    from leveret.broker.vhost import VirtualHost


def bind(
    vhost: VirtualHost,
    actor: Actor,
    source: str,
    dest_kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any] | None = None,
) -> bool:
    """Whether the binding is new; ``dest_kind`` is "queue" or "exchange"."""
    return _binding_action(
        vhost, actor, True, source, dest_kind, destination, routing_key, arguments
    )


def unbind(
    vhost: VirtualHost,
    actor: Actor,
    source: str,
    dest_kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any] | None = None,
) -> bool:
    """Whether there was such a binding. As RabbitMQ 3.10 (rabbit_binding:remove,
    absent_errs_only), unbinding from or to something that does not exist succeeds."""
    return _binding_action(
        vhost, actor, False, source, dest_kind, destination, routing_key, arguments
    )


def _binding_action(
    vhost: VirtualHost,
    actor: Actor,
    add: bool,
    source: str,
    dest_kind: str,
    destination: str,
    routing_key: str,
    arguments: dict[str, Any] | None,
) -> bool:
    source, destination = actor.name(source), actor.name(destination)
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
    if add:
        return vhost.bind(src, dest, routing_key, arguments)
    return vhost.unbind(src, dest, routing_key, arguments)
