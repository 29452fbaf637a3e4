"""Topic permissions: which routing keys a user may publish with (write) and bind with
(read) on a topic exchange, per vhost (rabbit_auth_backend_internal's topic
permissions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from leveret.protocol import errors

if TYPE_CHECKING:
    from leveret.broker.exchanges import Exchange
    from leveret.broker.vhost import VirtualHost


def authorize_topic(
    vhost: VirtualHost, exchange: Exchange, username: str, routing_key: str, what: str
) -> None:
    """A topic exchange's topic permission for ``what`` (write: publish, read: bind) on
    ``routing_key``; no topic permission for the exchange allows everything."""
    if exchange.type_name != "topic":
        return
    perm = vhost.topic_permissions.get((username, exchange.name))
    if perm is not None and not perm.allows(what, routing_key):
        # from 3.13 the text names the permission (v4.2.9 rabbit_access_control.erl:356)
        named = f"{what} access" if vhost.compat.v4 else "access"
        raise errors.access_refused(
            f"{named} to topic '{routing_key}' in exchange '{exchange.name}' in vhost "
            f"'{vhost.name}' refused for user '{username}'"
        )
