"""Who may log in, and where, for every protocol: the SASL check of a client's credentials
(:func:`check`), and the vhost a user opens (:func:`vhost_access`), in RabbitMQ's order.

:func:`check` only decides: the user, or a :class:`Refusal` saying why in RabbitMQ's words
(the reason its ``user.authentication.failure`` event carries). Each protocol answers a
refusal as RabbitMQ's reader for it does — AMQP 0-9-1 with a connection error
(:func:`amqp_refusal`), the stream protocol with a response code — and tells of it with
:func:`refused`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum, auto

from leveret.broker.broker import BrokerCore
from leveret.broker.erlterms import binary_term
from leveret.broker.events import UserAuthenticationFailed
from leveret.broker.ports import ConnectionInfo
from leveret.broker.users import Permission, User
from leveret.broker.vhost import VirtualHost
from leveret.protocol import errors, sasl
from leveret.protocol.errors import AMQPError

log = logging.getLogger(__name__)

#: rabbit_auth_mechanism_ssl's words for a TLS client that presented no certificate
NO_CERTIFICATE = "connection peer presented no TLS (x.509) certificate"
# rabbit_auth_backend_internal's refusal of a blank password
_BLANK_PASSWORD = (
    "user '{}' attempted to log in with a blank password, which is prohibited by the "
    "internal authN backend. To use TLS/x509 certificate-based authentication, see the "
    "rabbitmq_auth_mechanism_ssl plugin and configure the client to use the EXTERNAL "
    "authentication mechanism. Alternatively change the password for the user to be "
    "non-blank."
)


class Why(Enum):
    """Why a login was refused."""

    UNKNOWN_MECHANISM = auto()  # a mechanism no one knows
    NOT_OFFERED = auto()  # a mechanism this connection was not offered
    BAD_RESPONSE = auto()  # the mechanism cannot read the response
    NO_CERTIFICATE = auto()  # EXTERNAL without a certificate that names someone
    INVALID_CREDENTIALS = auto()  # no such user, or a wrong password
    BLANK_PASSWORD = auto()
    LOOPBACK = auto()  # a loopback-only user from elsewhere


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused login: why, who it named (None when no one), RabbitMQ's reason."""

    why: Why
    mechanism: str
    username: str | None
    reason: str


def _chars(name: str) -> str:
    """A user name as ``~s`` writes a binary: each of its bytes a character."""
    return name.encode().decode("latin-1")


def check(
    broker: BrokerCore,
    mechanism: str,
    response: bytes,
    offered: tuple[str, ...],
    address: str | None,
    external_name: str | None = None,
    external_refusal: str = NO_CERTIFICATE,
) -> User | Refusal:
    """The user SASL credentials name, or why they are refused. ``offered``: the
    mechanisms this connection was offered; ``address``: where it comes from;
    ``external_name``: who the client's TLS certificate names (EXTERNAL), and
    ``external_refusal`` why there is no one."""
    if mechanism not in sasl.MECHANISMS:
        return Refusal(Why.UNKNOWN_MECHANISM, mechanism, None, f"unknown mechanism {mechanism}")
    if mechanism not in offered:
        return Refusal(Why.NOT_OFFERED, mechanism, None, f"mechanism {mechanism} not offered")
    users = broker.users
    if mechanism == "EXTERNAL":  # the response is not read: the certificate is the credential
        if external_name is None:
            return Refusal(Why.NO_CERTIFICATE, mechanism, None, external_refusal)
        user = users.users.get(external_name)
        if user is None:
            why = f"user '{_chars(external_name)}' - invalid credentials"
            return Refusal(Why.INVALID_CREDENTIALS, mechanism, external_name, why)
        name = user.name
    else:
        try:
            if mechanism == "ANONYMOUS":  # rabbit_auth_mechanism_anonymous: the response
                name, password = broker.anonymous_login  # is not read
            else:
                name, password = (
                    sasl.plain(response) if mechanism == "PLAIN" else sasl.amqplain(response)
                )
        except sasl.BadResponse:
            # rabbit_auth_mechanism_plain's protocol error: no one to name
            why = f"response {binary_term(response, len('response '))} invalid"
            return Refusal(Why.BAD_RESPONSE, mechanism, None, why)
        if password == "":  # refused before it is checked, as RabbitMQ's internal backend
            return Refusal(
                Why.BLANK_PASSWORD, mechanism, name, _BLANK_PASSWORD.format(_chars(name))
            )
        found = users.check_credentials(name, password)
        if found is None:
            why = f"user '{_chars(name)}' - invalid credentials"
            return Refusal(Why.INVALID_CREDENTIALS, mechanism, name, why)
        user = found
    if users.loopback_only(name, address):
        return Refusal(
            Why.LOOPBACK, mechanism, name, f"user '{name}' can only connect via localhost"
        )
    return user


def counted(
    broker: BrokerCore, protocol: str, address: str, result: User | Refusal
) -> User | Refusal:
    """Count a login attempt, as the reader of ``protocol`` ("amqp091", "amqp10",
    "stream") tells rabbit_core_metrics of it: a mechanism no one knows or not offered is
    no attempt; a response the mechanism cannot read is a failure of no one. ``address``
    is the client's ("" for AMQP 1.0: RabbitMQ 3.10's plugin gives no address). Returns
    ``result``."""
    if isinstance(result, User):
        broker.auth_attempts.count(protocol, address, result.name, True)
    elif result.why not in (Why.UNKNOWN_MECHANISM, Why.NOT_OFFERED):
        broker.auth_attempts.count(protocol, address, result.username or "", False)
    return result


def refused(broker: BrokerCore, connection: ConnectionInfo, refusal: Refusal) -> None:
    """Tell of a refused login (``user.authentication.failure``)."""
    broker.observers.emit(UserAuthenticationFailed(connection, refusal.username, refusal.reason))


def _login_refused(mechanism: str) -> AMQPError:
    return errors.access_refused(
        f"Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )


def amqp_refusal(broker: BrokerCore, connection: ConnectionInfo, refusal: Refusal) -> AMQPError:
    """A refused AMQP 0-9-1 login as rabbit_reader answers it: a mechanism it does not
    know or did not offer is a command error; anything else ACCESS_REFUSED, told of as
    user.authentication.failure when credentials were checked."""
    mechanism = refusal.mechanism
    why = refusal.why
    if why is Why.UNKNOWN_MECHANISM:
        return errors.command_invalid(f"unknown authentication mechanism '{mechanism}'")
    if why is Why.NOT_OFFERED:
        return errors.command_invalid(f"invalid authentication mechanism '{mechanism}'")
    if mechanism == "EXTERNAL":
        log.warning("EXTERNAL login refused for %r: %s", refusal.username, refusal.reason)
        return _login_refused(mechanism)
    if why is Why.BAD_RESPONSE:
        return _login_refused(mechanism)
    username = refusal.username or ""
    reason = f"user '{username}' - invalid credentials"
    broker.observers.emit(UserAuthenticationFailed(connection, username, reason))
    # as rabbit_reader words it, at its level
    log.error(
        "Error on AMQP connection (%s, state: starting):\n%s login refused: %s",
        connection.name,
        mechanism,
        reason,
    )
    return _login_refused(mechanism)


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
