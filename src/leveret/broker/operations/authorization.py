"""The checks rabbit_channel makes before it declares, deletes or binds, in its order
(rabbit_access_control:check_resource_access and the rest). Every operation calls them;
nothing else does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker import errors as rabbit
from leveret.broker.arguments import text, wire_type
from leveret.broker.exchanges import exchange_type
from leveret.broker.limits import check_queue_limit
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.operations.actor import Actor
    from leveret.broker.vhost import VirtualHost


def not_default(exchange_name: str) -> None:
    """rabbit_channel:check_not_default_exchange."""
    if exchange_name == "":
        raise errors.access_refused("operation not permitted on the default exchange")


def check_access(vhost: VirtualHost, actor: Actor, what: str, kind: str, name: str) -> None:
    """rabbit_access_control:check_resource_access: ``what`` (configure, write, read) on
    a resource; the default exchange is checked under the name 'amq.default'."""
    if kind == "exchange" and name == "":
        name = "amq.default"
    permission = actor.permission
    if permission is None or not permission.allows(what, name):
        named = what if vhost.compat.v4 else None
        raise rabbit.access_refused(kind, name, vhost.name, actor.username, named)


def passive_declare(vhost: VirtualHost, actor: Actor, kind: str, name: str) -> None:
    """A passive declare: RabbitMQ 3.10.8 checks no permission; RabbitMQ 4.2 wants any of
    read, write or configure on the queue or exchange, configure tried last so that a
    refusal reads as a declare's (v4.2.9 rabbit_channel.erl:916-950, 2644-2650,
    2756-2763; rabbitmq/rabbitmq-server#16085)."""
    if not vhost.compat.v4:
        return
    permission = actor.permission
    if permission is not None and (
        permission.allows("read", name) or permission.allows("write", name)
    ):
        return
    check_access(vhost, actor, "configure", kind, name)


def exchange_declare(
    vhost: VirtualHost, actor: Actor, name: str, type_name: str, arguments: dict[str, Any]
) -> None:
    """exchange.declare (not passive): the type, the default exchange, configure; for a
    new exchange, its name and its alternate exchange (read on the exchange being
    declared, write on the alternate)."""
    exchange_type(type_name, vhost.compat.v4)
    not_default(name)
    check_access(vhost, actor, "configure", "exchange", name)
    if name in vhost.exchanges:
        return
    if name.startswith("amq."):
        raise rabbit.reserved_name("exchange", name)
    check_named_exchange(vhost, actor, arguments, "alternate-exchange", "exchange", name)


def check_named_exchange(
    vhost: VirtualHost, actor: Actor, arguments: dict[str, Any], key: str, kind: str, name: str
) -> None:
    """A new exchange's alternate exchange, a new queue's dead-letter exchange: when the
    argument ``key`` names one (a value that is no string is refused as RabbitMQ does),
    read on the resource being declared, then write on the exchange it names."""
    value = arguments.get(key)
    if value is None:
        return
    if not isinstance(value, (str, bytes)):
        raise errors.precondition_failed(
            f"invalid type '{wire_type(arguments, key)}' for arg '{key}' in {kind} "
            f"'{name}' in vhost '{vhost.name}'"
        )
    check_access(vhost, actor, "read", kind, name)
    check_access(vhost, actor, "write", "exchange", text(value))


def queue_declare(
    vhost: VirtualHost,
    actor: Actor,
    name: str,
    arguments: dict[str, Any],
    server_named: bool = False,
) -> None:
    """queue.declare (not passive): the reserved prefix (unless the server named it),
    configure; for a new queue, the vhost's max-queues, then its dead-letter exchange
    (read on the queue, write on the exchange) before any other argument is looked at."""
    if not server_named and name.startswith("amq."):
        raise rabbit.reserved_name("queue", name)
    check_access(vhost, actor, "configure", "queue", name)
    if name in vhost.queues:
        return
    check_queue_limit(vhost, name)  # for new queues only, as rabbit_channel
    check_named_exchange(vhost, actor, arguments, "x-dead-letter-exchange", "queue", name)


def binding(
    vhost: VirtualHost, actor: Actor, source: str, dest_kind: str, destination: str
) -> None:
    """Binding and unbinding (rabbit_channel:binding_action): write on the destination,
    neither end the default exchange, read on the source."""
    check_access(vhost, actor, "write", dest_kind, destination)
    if dest_kind == "exchange":
        not_default(destination)
    not_default(source)
    check_access(vhost, actor, "read", "exchange", source)
