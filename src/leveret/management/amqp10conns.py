"""AMQP 1.0 connections in the management API (/api/connections, /api/channels and, in
RabbitMQ 4.2's shape, /api/connections/{name}/sessions), as the RabbitMQ Leveret
behaves as shows them (:mod:`leveret.broker.amqp10_presence`).

RabbitMQ 3.10.8's rabbitmq_amqp1_0 plugin (measured on the reference with a proton
client): each *session* is a row of /api/connections, the direct connection it runs
over, with the few keys of amqp_direct_connection's creation event (no channels, frame
or traffic figures, no state); a connection with no session is not listed, one with two
sessions is listed twice under one name (and cannot then be asked for, nor closed, by
it: 404). Each session's channel 1 is a channel of /api/channels, with the figures of
the session's publishes, confirms, deliveries and acknowledgements.

RabbitMQ 4.2 (v4.2.9 rabbit_amqp_reader.erl ?CONNECTION_EVENT_KEYS and emit_stats,
rabbit_mgmt_format:protocol, rabbit_amqp_session.erl infos/1): one network connection
(protocol "AMQP 1-0") with its sessions counted as channels, none listed as one; its
sessions, links and their credit at .../sessions."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from leveret.broker.amqp10_presence import DIRECT_TLS_KEYS, PLUGIN_PREFETCH, DirectConnection
from leveret.broker.amqp10_session import Amqp10Session
from leveret.management import views

if TYPE_CHECKING:
    from leveret.broker.amqp10_common import LinkSession
    from leveret.management.stats import Stats
    from leveret.protocol.amqp10.session import Link

#: an AMQP 1.0 connection as /api/connections lists it: a session's direct connection
#: (RabbitMQ 3.10.8) or the connection itself (RabbitMQ 4.2)
Amqp10Row = DirectConnection | Amqp10Session
L = TypeVar("L")

# rabbit_amqp_reader's TLS items (?AUTH_EVENT_KEYS): '' without TLS (null in listings)
_NATIVE_TLS_KEYS = (*DIRECT_TLS_KEYS, "peer_cert_serial_number")


def connection(c: Amqp10Row, stats: Stats | None = None, alarm: bool = False) -> dict[str, Any]:
    """An AMQP 1.0 row of /api/connections, by the RabbitMQ's shape: the one function
    that tells RabbitMQ 3.10.8's plugin's connections from RabbitMQ 4.2's."""
    if isinstance(c, DirectConnection):
        return direct_connection(c)
    return native_connection(c, stats, alarm)


def direct_connection(c: DirectConnection) -> dict[str, Any]:
    """RabbitMQ 3.10.8: amqp_direct_connection's ?CREATION_EVENT_KEYS (pid left out) and
    its adapter's ssl items, the same in a listing and alone."""
    peer = c.peer or ("", 0)
    local = c.local or ("", 0)
    tls = c.transport_details
    ssl = bool(tls.get("ssl", False))
    out: dict[str, Any] = {
        "client_properties": {},
        "connected_at": c.connected_at,
        "host": local[0],
        "name": c.name,
        "node": c.owner.broker.node_name,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "port": local[1],
        "protocol": c.protocol,
        "ssl": ssl,
        "type": c.kind,
        "user": c.username,
        "user_who_performed_action": c.username,
        "vhost": c.vhost,
    }
    if ssl:
        out.update({key: tls[key] for key in DIRECT_TLS_KEYS if tls.get(key) is not None})
    return dict(sorted(out.items()))


def native_connection(s: Amqp10Session, stats: Stats | None, alarm: bool) -> dict[str, Any]:
    """RabbitMQ 4.2: rabbit_amqp_reader's ?CONNECTION_EVENT_KEYS and its statistics (no
    reductions nor garbage collection: Leveret has no such figures)."""
    out = views.connection_common(s)
    tls = s.transport_details
    out.update(
        {
            "channel_max": s.conn.channel_max,
            "channels": len(s.sessions),
            "client_properties": views.jsonable(s.client_properties),
            "container_id": s.container_id,
            # the client's max-frame-size (unlimited: the largest uint)
            "frame_max": getattr(s.conn, "remote_max_frame_size", 0),
            "protocol": s.protocol,
            "ssl": bool(tls.get("ssl", False)),
            "state": "blocked" if s.blocked else ("blocking" if alarm else "running"),
            "type": "network",
        }
    )
    for key in _NATIVE_TLS_KEYS:
        out[key] = tls.get(key)
    views.add_traffic(out, s, stats)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------- channels
def channel_name(c: DirectConnection) -> str:
    return f"{c.name} ({c.channel.number})"


def channel(c: DirectConnection, stats: Stats, node: str) -> dict[str, Any]:
    """RabbitMQ 3.10.8: the session's channel 1 on its direct connection, as
    rabbit_channel shows it (no reductions, garbage collection nor idle time: Leveret
    has no such figures)."""
    from leveret.management.stats import (
        CHANNEL_PUBLISH_STATS,
        DELIVERY_STATS,
        amqp10_channel_counters,
    )

    session: LinkSession = c.session
    f = session.figures
    peer = c.peer or ("", 0)
    out: dict[str, Any] = {
        "acks_uncommitted": 0,
        "confirm": f.confirm_mode,
        "connection_details": {"name": c.name, "peer_host": peer[0], "peer_port": peer[1]},
        "consumer_count": len(session.consumers),
        "global_prefetch_count": 0,
        "messages_unacknowledged": len(session.unsettled),
        "messages_uncommitted": 0,
        "messages_unconfirmed": len(session.confirms),
        "name": channel_name(c),
        "node": node,
        "number": c.channel.number,
        "pending_raft_commands": 0,
        "prefetch_count": PLUGIN_PREFETCH,
        # credit flow holds a channel back with its connection
        "state": "flow" if getattr(c.owner, "held_by", None) else "running",
        "transactional": False,
        "user": c.username,
        "user_who_performed_action": c.username,
        "vhost": c.vhost,
    }
    counters = amqp10_channel_counters(c)
    keys = (CHANNEL_PUBLISH_STATS if counters["publish"] else ()) + (
        DELIVERY_STATS if counters["deliver_get"] else ()
    )
    if keys:
        out["message_stats"] = stats.message_stats(
            counters, stats.channels.get(c.channel), tuple(sorted(keys))
        )
    return out


# ------------------------------------------------------------------- sessions
_SETTLE_MODES = {0: "unsettled", 1: "settled", 2: "mixed"}


def _links(s: Amqp10Session, number: int, links: Mapping[int, L]) -> Iterator[tuple[int, L, Link]]:
    """A session's links by handle, each with its state on the connection."""
    for handle, link in sorted(links.items()):
        yield handle, link, s.conn.link(number, handle)


def sessions(s: Amqp10Session) -> list[dict[str, Any]]:
    """RabbitMQ 4.2's /api/connections/{name}/sessions: rabbit_amqp_session:infos/1 of
    each session, by channel number; each link's handle, name, address, settlement,
    maximum message size, delivery count and credit, as the link's state has them."""
    out = []
    for number, session in sorted(s.sessions.items()):
        own = s.conn.session(number)
        incoming = [
            {
                "handle": handle,
                "link_name": link.name,
                "snd_settle_mode": _SETTLE_MODES.get(state.snd_settle_mode, "mixed"),
                "target_address": link.address,
                "max_message_size": link.max_message_size,
                "delivery_count": state.delivery_count,
                "credit": state.credit,
                "unconfirmed_messages": 0,
            }
            for handle, link, state in _links(s, number, session.publishers)
        ]
        outgoing = [
            {
                "handle": handle,
                "link_name": clink.name,
                "source_address": clink.address,
                "queue_name": clink.queue.name,
                "send_settled": clink.settled,
                # the client's limit for what it is sent
                "max_message_size": state.max_message_size or "unlimited",
                "filter": list(clink.filters),
                "delivery_count": state.delivery_count,
                "credit": state.credit,
            }
            for handle, clink, state in _links(s, number, session.consumers)
        ]
        out.append(
            {
                "channel_number": number,
                "handle_max": own.handle_max,
                "next_incoming_id": own.next_incoming_id,
                "incoming_window": own.incoming_window,
                "next_outgoing_id": own.next_outgoing_id,
                "remote_incoming_window": own.remote_incoming_window,
                "remote_outgoing_window": own.remote_outgoing_window,
                "outgoing_unsettled_deliveries": len(session.unsettled),
                "incoming_links": incoming,
                "outgoing_links": outgoing,
            }
        )
    return out
