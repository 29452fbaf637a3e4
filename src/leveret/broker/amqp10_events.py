"""What rabbitmq_event_exchange tells of AMQP 1.0 connections, by the RabbitMQ Leveret
behaves as (:mod:`leveret.broker.amqp10_presence`): the properties of their events, in
the order RabbitMQ builds them (the exchange folds them, so the last comes first).

RabbitMQ 3.10.8's plugin (measured on the reference with the event exchange enabled):

* a session's direct connection: ``user.authentication.success`` with only
  ``connection_type`` direct and ``name`` (rabbit_direct:notify_auth_result), then
  ``connection.created`` with amqp_direct_connection's creation keys (protocol
  ``{'AMQP',"1.0"}``, type direct, ``ssl`` last) and ``channel.created`` (number 1); each
  attach a disposable channel 2, created and closed; at its end ``channel.closed`` and
  ``connection.closed`` (pid, node, name);
* the AMQP 1.0 connection itself: no event at login (the plugin counts logins in its
  metrics only, failures too), and ``connection.closed`` from its reader when it goes,
  whatever it got to, with empty client properties.

RabbitMQ 4.2 (v4.2.9 rabbit_amqp_reader.erl: notify_auth, ?CONNECTION_EVENT_KEYS and
?AUTH_EVENT_KEYS in rabbit_amqp.hrl): the connection's login (success and failure, with
no error text) and ``connection.created`` with protocol ``{1,0}``, its container id, and
its TLS items; its consumers' channel is the session."""

from __future__ import annotations

from typing import Any, Protocol

from leveret.broker.amqp10_presence import (
    DIRECT_TLS_KEYS,
    DirectConnection,
    Shape,
    consumer_shape,
    shape,
)
from leveret.broker.erlterms import Term, ip_term, table_terms

Value = Any

#: amqp_direct_connection's adapter protocol, as the event exchange prints it
_PLUGIN_PROTOCOL = Term("{'AMQP',\"1.0\"}")
#: rabbit_amqp_reader's i(protocol)
_NATIVE_PROTOCOL = Term("{1,0}")
#: ?AUTH_EVENT_KEYS' TLS items: the adapter's (DIRECT_TLS_KEYS), the serial number
#: before the validity
_NATIVE_TLS = (*DIRECT_TLS_KEYS[:-1], "peer_cert_serial_number", "peer_cert_validity")


class Exchange(Protocol):
    """The event exchange, as these functions name pids and nodes."""

    @property
    def node(self) -> str: ...

    def pid(self, *numbers: int) -> Term: ...

    def connection_pid(self, connection: Any) -> Term: ...

    def channel_pid(self, channel: Any) -> Term: ...


def is_amqp10(c: Any) -> bool:
    """An AMQP 1.0 connection (the session of its socket)."""
    return getattr(c, "protocol", None) == "AMQP 1-0"


def _ends(c: Any) -> tuple[tuple[str, int], tuple[str, int]]:
    return (c.peer or ("", 0)), (c.local or ("", 0))


def _tls(c: Any) -> dict[str, Any]:
    return getattr(c, "transport_details", None) or {}


def _native_addresses(c: Any) -> list[tuple[str, Value]]:
    """An AMQP 1.0 connection's ends and protocol, as its events (RabbitMQ 4.2) tell them."""
    peer, local = _ends(c)
    return [
        ("host", ip_term(str(local[0]))),
        ("port", int(local[1])),
        ("peer_host", ip_term(str(peer[0]))),
        ("peer_port", int(peer[1])),
        ("protocol", _NATIVE_PROTOCOL),
    ]


def _native_auth_items(c: Any) -> list[tuple[str, Value]]:
    """?AUTH_EVENT_KEYS after ``name``: those with a value ('' left out)."""
    tls = _tls(c)
    return [
        ("connection_name", c.name),
        *_native_addresses(c),
        *([("auth_mechanism", c.auth_mechanism)] if c.auth_mechanism else []),
        ("ssl", bool(tls.get("ssl", False))),
        *[(key, tls[key]) for key in _NATIVE_TLS if tls.get(key)],
    ]


def auth_success(c: Any) -> list[tuple[str, Value]] | None:
    """``user.authentication.success`` of an AMQP 1.0 connection (or a session's direct
    connection); None for any other."""
    if isinstance(c, DirectConnection):
        return [("connection_type", "direct"), ("name", c.username)]
    if is_amqp10(c):
        return [("name", c.username), *_native_auth_items(c)]
    return None


def auth_failure(c: Any, user: str | None) -> list[tuple[str, Value]] | None:
    """``user.authentication.failure`` of an AMQP 1.0 connection: RabbitMQ 4.2 tells of it
    (without the reason), 3.10.8's plugin does not ([]). None for any other connection."""
    if not is_amqp10(c):
        return None
    if shape(c.broker) is Shape.PLUGIN:
        return []
    return [*([("name", user)] if user else []), *_native_auth_items(c)]


def connection_created(x: Exchange, c: Any) -> list[tuple[str, Value]] | None:
    """``connection.created`` of a session's direct connection (its creation keys, then
    the adapter's ssl items), or of an AMQP 1.0 connection (RabbitMQ 4.2's
    ?CONNECTION_EVENT_KEYS); who performed it follows. None for any other."""
    if isinstance(c, DirectConnection):
        peer, local = _ends(c)
        tls = _tls(c)
        ssl = bool(tls.get("ssl", False))
        return [
            ("pid", x.connection_pid(c)),
            ("protocol", _PLUGIN_PROTOCOL),
            ("host", ip_term(str(local[0]))),
            ("port", int(local[1])),
            ("name", c.name),
            ("peer_host", ip_term(str(peer[0]))),
            ("peer_port", int(peer[1])),
            ("user", c.username),
            ("vhost", c.vhost),
            ("client_properties", []),
            ("type", "direct"),
            ("connected_at", c.connected_at),
            ("node", x.node),
            ("user_who_performed_action", c.username),
            ("ssl", ssl),
            *([(key, tls.get(key, "")) for key in DIRECT_TLS_KEYS] if ssl else []),
        ]
    if not is_amqp10(c):
        return None
    tls = _tls(c)
    return [
        ("type", "network"),
        ("client_properties", table_terms(dict(c.client_properties))),
        ("connected_at", int(c.connected_at)),
        ("channel_max", int(c.conn.channel_max)),  # as the open agreed
        ("pid", x.connection_pid(c)),
        ("frame_max", int(getattr(c.conn, "remote_max_frame_size", 0))),  # the client's
        ("timeout", int(c.heartbeat)),
        ("container_id", c.container_id),
        ("vhost", c.vhost),
        ("user", c.username),
        ("node", x.node),
        ("name", c.name),
        *_native_addresses(c),
        ("auth_mechanism", c.auth_mechanism),
        ("ssl", bool(tls.get("ssl", False))),
        *[(key, tls.get(key, "")) for key in _NATIVE_TLS],
        ("user_who_performed_action", c.username),
    ]


def connection_closed(x: Exchange, c: Any) -> list[tuple[str, Value]] | None:
    """``connection.closed`` of a session's direct connection (amqp_direct_connection's
    terminate), or of an AMQP 1.0 connection, told of whatever it got to (rabbit_reader:
    the plugin's reader sets no client properties; RabbitMQ 4.2's sets the open's)."""
    if isinstance(c, DirectConnection):
        return [("pid", x.connection_pid(c)), ("node", x.node), ("name", c.name)]
    if not is_amqp10(c):
        return None
    props: list[Value] = []
    if shape(c.broker) is Shape.NATIVE and c.registered:
        props = table_terms(dict(c.client_properties))
    return [
        ("name", c.name),
        ("pid", x.connection_pid(c)),
        ("node", x.node),
        ("client_properties", props),
    ]


def consumer(x: Exchange, c: Any) -> tuple[str, int, list[Term], Term] | None:
    """An AMQP 1.0 consumer's tag, prefetch, arguments and channel pid as its events
    show them (:func:`~leveret.broker.amqp10_presence.consumer_shape`); None for any
    other consumer. A RabbitMQ 4.2 consumer's channel is its session's process."""
    link = getattr(c, "channel", None)
    if link is None or not is_amqp10(getattr(link, "session", None)):
        return None
    seen = consumer_shape(c)
    if seen.channel is not None:
        channel = x.channel_pid(seen.channel)
    else:
        channel = x.pid(1, int(link.session.id), 1 + int(link.channel))
    return seen.tag, seen.prefetch, table_terms(seen.arguments), channel
