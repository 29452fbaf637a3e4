"""Who may log in, and where: the checks of connection.start-ok and connection.open, in
RabbitMQ's order and with its words. A session asks; these answer with the user (or the
vhost's access) or with the error that refuses it."""

from __future__ import annotations

import logging

from leveret.broker.broker import BrokerCore
from leveret.broker.events import UserAuthenticationFailed
from leveret.broker.ports import ConnectionInfo
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol import errors, sasl
from leveret.protocol.errors import AMQPError

log = logging.getLogger(__name__)


def _login_refused(mechanism: str) -> AMQPError:
    return errors.access_refused(
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )


def authenticate(
    broker: BrokerCore,
    connection: ConnectionInfo,
    mechanism: str,
    response: bytes,
    offered: tuple[str, ...],
    external_name: str | None,
) -> User | AMQPError:
    """The user connection.start-ok's credentials name, or why they are refused.

    ``offered``: the mechanisms connection.start listed on this connection;
    ``external_name``: who the client's TLS certificate says it is (EXTERNAL)."""
    if mechanism not in sasl.MECHANISMS:
        return errors.command_invalid(f"unknown authentication mechanism '{mechanism}'")
    if mechanism not in offered:
        return errors.command_invalid(f"invalid authentication mechanism '{mechanism}'")
    address = connection.peer[0] if connection.peer else None
    if mechanism == "EXTERNAL":
        # the response is not read: the certificate is the credential
        user = None
        if external_name is not None:
            user = broker.users.authenticate_external(external_name, address)
        if user is None:
            log.warning("EXTERNAL login refused for %r from %s", external_name, address)
            return _login_refused(mechanism)
        return user
    try:
        if mechanism == "PLAIN":
            username, password = sasl.plain(response)
        else:
            username, password = sasl.amqplain(response)
    except sasl.BadResponse:
        return _login_refused(mechanism)
    user = broker.users.authenticate(username, password, address)
    if user is None:
        why = f"user '{username}' - invalid credentials"
        broker.observers.emit(UserAuthenticationFailed(connection, username, why))
        # as rabbit_reader words it, at its level
        log.error(
            "Error on AMQP connection (%s, state: starting):\n"
            "%s login refused: user '%s' - invalid credentials",
            connection.name,
            mechanism,
            username,
        )
        return _login_refused(mechanism)
    return user


def vhost_access(
    broker: BrokerCore, user: User, vhost: str
) -> tuple[VirtualHost, Permission] | AMQPError:
    """connection.open: the vhost and the user's permissions in it, or why it is refused:
    as rabbit_reader, the vhost's connection limit, the user's, then access."""
    obj = broker.vhosts.get(vhost)
    if obj is None:
        return errors.not_allowed(f"vhost {vhost} not found")
    limit = obj.limit("max-connections")
    if limit is not None and broker.open_connections(vhost=vhost) >= limit:
        return errors.not_allowed(
            f"access to vhost '{vhost}' refused for user '{user.name}': "
            f"connection limit ({limit}) is reached"
        )
    limit = broker.user_limit(user.name, "max-connections")
    if limit is not None and broker.open_connections(user=user.name) >= limit:
        return errors.not_allowed(
            f"connection refused for user '{user.name}': user connection limit ({limit}) is reached"
        )
    perm = broker.users.permission(user.name, vhost)
    if perm is None:
        return errors.not_allowed(f"access to vhost '{vhost}' refused for user '{user.name}'")
    return obj, perm
