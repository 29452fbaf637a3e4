"""exchange.declare and exchange.delete, each given its method record (the one the
AMQP session decoded, or the one the management API builds, as RabbitMQ's acts
through a channel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.broker.operations import authorization
from leveret.broker.operations.authorization import check_access, not_default
from leveret.protocol import errors, spec

if TYPE_CHECKING:
    from pamqp import commands

    from leveret.broker.exchanges import Exchange
    from leveret.broker.operations.actor import Actor
    from leveret.broker.vhost import VirtualHost


def declare_exchange(
    vhost: VirtualHost, actor: Actor, method: commands.Exchange.Declare
) -> tuple[Exchange, bool]:
    """The exchange and whether this declaration made it."""
    name = actor.name(method.exchange)
    if method.passive:
        not_default(name)
        authorization.passive_declare(vhost, actor, "exchange", name)
        return vhost.get_exchange(name), False
    arguments = spec.arguments(method)
    authorization.exchange_declare(vhost, actor, name, method.exchange_type, arguments)
    x, new = vhost.declare_exchange(
        name, method.exchange_type, method.durable, method.auto_delete, method.internal, arguments
    )
    if new:  # shown by the management API, as RabbitMQ does
        x.user_who_performed_action = actor.username
    return x, new


def delete_exchange(vhost: VirtualHost, actor: Actor, method: commands.Exchange.Delete) -> bool:
    """Whether there was such an exchange; the default and ``amq.*`` ones are refused."""
    name = actor.name(method.exchange)
    not_default(name)
    if name.startswith("amq."):
        raise errors.access_refused(
            f"deletion of system exchange '{name}' in vhost '{vhost.name}' not allowed"
        )
    check_access(vhost, actor, "configure", "exchange", name)
    return vhost.delete_exchange(name, method.if_unused)
