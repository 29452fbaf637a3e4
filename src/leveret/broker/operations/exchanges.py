"""exchange.declare and exchange.delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leveret.broker.operations import authorization
from leveret.broker.operations.authorization import check_access, not_default
from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.operations.actor import Actor
    from leveret.broker.vhost import VirtualHost


def declare_exchange(
    vhost: VirtualHost,
    actor: Actor,
    name: str,
    type_name: str,
    durable: bool = False,
    auto_delete: bool = False,
    internal: bool = False,
    arguments: dict[str, Any] | None = None,
    passive: bool = False,
) -> tuple[Exchange, bool]:
    """The exchange and whether this declaration made it."""
    name = actor.name(name)
    if passive:
        not_default(name)
        return vhost.get_exchange(name), False
    arguments = arguments if arguments is not None else {}
    authorization.exchange_declare(vhost, actor, name, type_name, arguments)
    x, new = vhost.declare_exchange(name, type_name, durable, auto_delete, internal, arguments)
    if new:  # shown by the management API, as RabbitMQ does
        x.user_who_performed_action = actor.username
    return x, new


def delete_exchange(vhost: VirtualHost, actor: Actor, name: str, if_unused: bool = False) -> bool:
    """Whether there was such an exchange; the default and ``amq.*`` ones are refused."""
    name = actor.name(name)
    not_default(name)
    if name.startswith("amq."):
        raise errors.access_refused(
            f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed"
        )
    check_access(vhost, actor, "configure", "exchange", name)
    return vhost.delete_exchange(name, if_unused)
