"""The JSON shapes of RabbitMQ 3.10's management API, built from broker objects."""

from __future__ import annotations

import base64
import json
import ssl
import zlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from leveret.broker.amqp10_links import LinkConsumer
from leveret.broker.amqp10_presence import consumer_shape
from leveret.broker.exchanges import exchange_types as exchange_type_classes
from leveret.broker.queues import QuorumQueue
from leveret.management.stats import DISK_RATES, TRAFFIC

if TYPE_CHECKING:
    from leveret.broker.amqp10_session import Amqp10Session
    from leveret.broker.broker import BrokerCore
    from leveret.broker.channel import Channel
    from leveret.broker.consumer import Consumer
    from leveret.broker.exchanges import Binding, Exchange
    from leveret.broker.ports import ConnectionInfo
    from leveret.broker.queues import Queue
    from leveret.broker.session import Session
    from leveret.broker.stream_session import Publisher, StreamSession, Subscription
    from leveret.broker.users import Permission, User
    from leveret.broker.vhost import VirtualHost
    from leveret.management.stats import Stats


def exchange_types(v4: bool = False) -> list[dict[str, Any]]:
    """The exchange types the broker has, as /api/overview lists them: the AMQP ones and
    those of the plugins, by name (and RabbitMQ 4's x-local-random with ``v4``)."""
    return [
        {
            "name": name,
            "description": cls.description
            or f"AMQP {name} exchange, as per the AMQP specification",
            "enabled": True,
        }
        for name, cls in sorted(exchange_type_classes(v4).items())
    ]


def jsonable(value: Any) -> Any:
    """Field-table values as JSON: bytes as text, nested tables and arrays kept."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "as_tuple"):  # decimal.Decimal
        return float(value)
    return value


def channel_name(ch: Channel) -> str:
    return f"{ch.host.name} ({ch.number})"


def exchange(x: Exchange, stats: Stats | None = None, age: Any = None) -> dict[str, Any]:
    from leveret.management.stats import exchange_counters

    out: dict[str, Any] = {
        "arguments": jsonable(x.arguments),
        "auto_delete": x.auto_delete,
        "durable": x.durable,
        "internal": x.internal,
        "name": x.name,
        "type": x.type_name,
        "user_who_performed_action": x.user_who_performed_action or "rmq-internal",
        "vhost": x.vhost,
    }
    out.update(x.info())  # what a plugin's type adds (rabbit_exchange:info/1)
    if x.policy is not None:  # RabbitMQ names an exchange's policy only when it has one
        out["policy"] = x.policy.name
    if stats is not None and x.published_in:
        # as RabbitMQ: publish_in once something was published to it, publish_out once
        # it routed something on to a queue
        keys = ("publish_in", "publish_out") if x.published_out else ("publish_in",)
        _, _, age_m, incr_m = age or (None, None, None, None)
        out["message_stats"] = stats.message_stats(
            exchange_counters(x), stats.exchanges.get(x), keys, age_m, incr_m
        )
    return dict(sorted(out.items()))


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """The binding's id in URLs: the quoted key, then ``~`` and a hash of the arguments."""
    quoted = quote_plus(routing_key).replace("~", "%7E")
    if not arguments:
        return quoted or "~"
    digest = zlib.crc32(json.dumps(jsonable(arguments), sort_keys=True).encode())
    args = base64.urlsafe_b64encode(digest.to_bytes(4, "big")).decode().rstrip("=")
    return f"{quoted}~{args}"


def binding(vhost: str, b: Binding) -> dict[str, Any]:
    return {
        "source": b.source,
        "vhost": vhost,
        "destination": b.destination.name,
        "destination_type": b.destination.kind,
        "routing_key": b.routing_key,
        "arguments": jsonable(dict(sorted(b.arguments.items()))),  # kept sorted, as RabbitMQ
        "properties_key": properties_key(b.routing_key, b.arguments),
    }


def default_binding(vhost: str, queue: str) -> dict[str, Any]:
    """The implicit binding of every queue to the default exchange (rabbit_binding's
    implicit_for_destination: made from the name, whether or not the queue exists)."""
    return {
        "source": "",
        "vhost": vhost,
        "destination": queue,
        "destination_type": "queue",
        "routing_key": queue,
        "arguments": {},
        "properties_key": properties_key(queue, {}),
    }


def all_bindings(v: VirtualHost) -> list[dict[str, Any]]:
    out = [default_binding(v.name, name) for name in v.queues]
    out.extend(binding(v.name, b) for b in v.bindings())
    out.sort(key=lambda b: (b["source"], b["destination_type"], b["destination"], b["routing_key"]))
    return out


def _channel_details(s: ConnectionInfo, number: int, node: str) -> dict[str, Any]:
    peer = s.peer or ("", 0)
    return {
        "connection_name": s.name,
        "name": f"{s.name} ({number})",
        "node": node,
        "number": number,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "user": s.username,
    }


def consumer(c: Consumer, node: str) -> dict[str, Any]:
    ch = c.channel
    tag, prefetch, arguments = c.tag, c.prefetch, c.arguments
    details: dict[str, Any] = {}
    if isinstance(c, LinkConsumer):  # an AMQP 1.0 link's, as its RabbitMQ shows it
        seen = consumer_shape(c)
        tag, prefetch, arguments = seen.tag, seen.prefetch, seen.arguments
        if seen.channel is not None:  # RabbitMQ 4.2's session is no channel: {}
            details = _channel_details(seen.channel.host, seen.channel.number, node)
    else:
        details = _channel_details(ch.connection, ch.number, node)
    active, status = True, "up"
    if c.queue.single_active_consumer_on:
        active = c.queue.active_consumer is c
        status = "single_active" if active else "waiting"
    return {
        "arguments": jsonable(arguments),
        "ack_required": not c.no_ack,
        "active": active,
        "activity_status": status,
        "channel_details": details,
        "consumer_tag": tag,
        "exclusive": c.exclusive,
        "prefetch_count": prefetch,
        "queue": {"name": c.queue.name, "vhost": c.queue.vhost},
    }


def queue(q: Queue, broker: BrokerCore, stats: Stats, age: Any = None) -> dict[str, Any]:
    from leveret.management.stats import DELIVERY_STATS, queue_counters, queue_lengths

    windows = stats.queues.get(q)
    lengths = queue_lengths(q)
    ready_bytes = q.ready_bytes
    persistent, persistent_bytes = q.persistent_figures()
    ram, ram_bytes = q.ram_figures()
    unacked_bytes, unacked_persistent, unacked_persistent_bytes = q.unacked_figures
    owner = q.exclusive_owner
    exclusive_tag = next((c.tag for c in q.consumers if c.exclusive), None)
    sac = q.active_consumer if q.single_active_consumer_on else None
    out: dict[str, Any] = {
        "arguments": jsonable(q.arguments),
        "auto_delete": q.auto_delete,
        "consumers": q.consumer_count,
        "durable": q.durable,
        "effective_policy_definition": jsonable(q.effective_policy_definition),
        "exclusive": owner is not None,
        "exclusive_consumer_tag": exclusive_tag,
        "head_message_timestamp": q.head_timestamp(),
        "message_bytes": ready_bytes + unacked_bytes,
        "message_bytes_paged_out": ready_bytes - ram_bytes,
        "message_bytes_persistent": persistent_bytes + unacked_persistent_bytes,
        "message_bytes_ram": ram_bytes + unacked_bytes,
        "message_bytes_ready": ready_bytes,
        "message_bytes_unacknowledged": unacked_bytes,
        "messages_paged_out": lengths["messages_ready"] - ram,
        "messages_persistent": persistent + unacked_persistent,
        "messages_ram": ram + lengths["messages_unacknowledged"],
        "messages_ready_ram": ram,
        "messages_unacknowledged_ram": lengths["messages_unacknowledged"],
        "name": q.name,
        "node": broker.node_name,
        "operator_policy": q.operator_policy.name if q.operator_policy else None,
        "policy": q.policy.name if q.policy else None,
        "recoverable_slaves": None,
        "single_active_consumer_tag": sac.tag if sac is not None else None,
        "state": "running",
        "type": q.type_name,
        "vhost": q.vhost,
    }
    capacity = q.consumer_capacity()
    if capacity is not None:  # classic queues measure it; RabbitMQ's others show none
        out["consumer_capacity"] = capacity if q.consumers else 0
        out["consumer_utilisation"] = capacity if q.consumers else 0
    age_l, incr_l, age_m, incr_m = age or (None, None, None, None)
    out.update(stats.length_details(lengths, windows, age_l, incr_l))
    counters = queue_counters(q)
    # As RabbitMQ: the publish figures once something was published, the delivery
    # figures once something was delivered or asked for.
    keys = (("publish",) if counters["publish"] else ()) + (
        DELIVERY_STATS if counters["deliver_get"] or counters["get_empty"] else ()
    )
    if keys:
        out["message_stats"] = stats.message_stats(counters, windows, keys, age_m, incr_m)
    if isinstance(q, QuorumQueue):
        _quorum_fields(out, q, broker.node_name)
        if broker.compat.v4:
            # the delivery limit in force, from 4.0 (v4.2.9 rabbit_quorum_queue.erl:632-638)
            limit = q.delivery_limit
            out["delivery_limit"] = limit if limit is not None else "unlimited"
            # rabbit_quorum_queue.erl:604-612 at v4.2.9 (priorities came with 4.0)
            high, normal, returned = q.ready_by_kind
            out["messages_ready_high"] = high
            out["messages_ready_normal"] = normal
            out["messages_ready_returned"] = returned
    return dict(sorted(out.items()))


# What RabbitMQ shows of a classic queue and not of a quorum queue.
_CLASSIC_ONLY = (
    "exclusive_consumer_tag",
    "head_message_timestamp",
    "message_bytes_paged_out",
    "messages_paged_out",
    "messages_ready_ram",
    "messages_unacknowledged_ram",
    "recoverable_slaves",
    "single_active_consumer_tag",
)


def _quorum_fields(out: dict[str, Any], q: QuorumQueue, node: str) -> None:
    """rabbit_quorum_queue's info keys: its members (one node here), the dead letters it
    holds, and every message counted as persistent."""
    for key in _CLASSIC_ONLY:
        out.pop(key, None)
    dlx, dlx_bytes = q.dead_lettered_figures
    unacked = q.unacked_bytes
    sac = q.active_consumer if q.single_active_consumer_on else None
    out.update(
        {
            "leader": node,
            "members": [node],
            "online": [node],
            "open_files": {node: q.open_files},
            "single_active_consumer_ctag": sac.tag if sac is not None else None,
            "messages_dlx": dlx,
            "message_bytes_dlx": dlx_bytes,
            "message_bytes": q.ready_bytes + unacked + dlx_bytes,
            "message_bytes_unacknowledged": unacked,
            # Leveret keeps them all in memory (RabbitMQ 3.10's rabbit_fifo keeps none)
            "messages_ram": q.message_count + q.unacked + dlx,
            "message_bytes_ram": q.ready_bytes + unacked + dlx_bytes,
        }
    )


def owner_details(q: Queue) -> dict[str, Any] | None:
    """The connection owning an exclusive queue (single-queue answers only, as RabbitMQ)."""
    owner = q.exclusive_owner
    if owner is None:
        return None
    peer = owner.peer or ("", 0)
    return {"name": owner.name, "peer_host": peer[0], "peer_port": peer[1]}


def flow_state(s: Session, alarm: bool) -> str:
    """A connection's state as RabbitMQ names it: blocked (a publisher stopped by a
    resource alarm), blocking (an alarm is in effect and it has not published since),
    flow (held back by credit flow), running; closed once it is gone."""
    if s.closed:
        return "closed"
    if s.blocked:
        return "blocked"
    if alarm:
        return "blocking"
    return "flow" if s.held_by else "running"


def connection_common(s: Session | StreamSession | Amqp10Session) -> dict[str, Any]:
    """What an AMQP and a stream-protocol connection show alike: the socket's ends, who
    and where."""
    peer = s.peer or ("", 0)
    local = s.local or ("", 0)
    return {
        "auth_mechanism": s.auth_mechanism,
        "connected_at": s.connected_at,
        "frame_max": s.frame_max,
        "host": local[0],
        "name": s.name,
        "node": s.broker.node_name,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "port": local[1],
        "timeout": s.heartbeat,
        "user": s.username,
        "user_who_performed_action": s.username,
        "vhost": s.vhost,
    }


def add_traffic(
    out: dict[str, Any], s: Session | StreamSession | Amqp10Session, stats: Stats | None
) -> None:
    """What the server counted on the socket (RabbitMQ's inet statistics), with the rates
    of the bytes."""
    traffic = s.traffic
    if traffic is None:
        return
    windows = stats.connections.get(s) if stats is not None else None
    out["recv_cnt"] = traffic.recv_cnt
    out["recv_oct"] = traffic.recv_oct
    out["send_cnt"] = traffic.send_cnt
    out["send_oct"] = traffic.send_oct
    out["send_pend"] = traffic.pending()
    for key in ("recv_oct", "send_oct"):
        out[f"{key}_details"] = windows.details(key) if windows is not None else {"rate": 0.0}


def connection(s: Session, stats: Stats | None = None, alarm: bool = False) -> dict[str, Any]:
    props = jsonable(s.client_properties)
    name = props.get("connection_name") if isinstance(props, dict) else None
    out = connection_common(s)
    out.update(
        {
            "channel_max": s.channel_max,
            "channels": len(s.channels),
            "client_properties": props,
            "peer_cert_issuer": s.transport_details.get("peer_cert_issuer"),
            "peer_cert_subject": s.transport_details.get("peer_cert_subject"),
            "peer_cert_validity": s.transport_details.get("peer_cert_validity"),
            "protocol": "AMQP 0-9-1",
            "ssl": s.transport_details.get("ssl", False),
            "ssl_cipher": s.transport_details.get("ssl_cipher"),
            "ssl_hash": s.transport_details.get("ssl_hash"),
            "ssl_key_exchange": s.transport_details.get("ssl_key_exchange"),
            "ssl_protocol": s.transport_details.get("ssl_protocol"),
            "state": flow_state(s, alarm),
            "type": "network",
        }
    )
    if name is not None:
        out["user_provided_name"] = name
    add_traffic(out, s, stats)
    return dict(sorted(out.items()))


# What RabbitMQ's stream reader shows of a connection without TLS: '' (null in listings,
# where the management database formats them; the empty string in a single answer).
_STREAM_TLS_KEYS = (
    "peer_cert_issuer",
    "peer_cert_subject",
    "peer_cert_validity",
    "ssl_cipher",
    "ssl_hash",
    "ssl_key_exchange",
    "ssl_protocol",
)


def stream_connection(
    s: StreamSession, stats: Stats | None = None, single: bool = False
) -> dict[str, Any]:
    """A stream-protocol connection as RabbitMQ 3.10's management API shows it (in
    /api/connections and /api/stream/connections): rabbit_stream_reader's infos."""
    props = dict(sorted(s.client_properties.items()))  # a map in rabbit_stream_reader
    details = s.transport_details
    blank = "" if single else None
    out = connection_common(s)
    out.update(
        {
            "channel_max": 0,
            "channels": 0,
            "client_properties": props,
            "protocol": "stream",
            "ssl": details.get("ssl", False),
            "state": "blocked" if s.blocked else "running",
        }
    )
    for key in _STREAM_TLS_KEYS:
        out[key] = details.get(key, blank)
    if "connection_name" in props:
        out["user_provided_name"] = props["connection_name"]
    add_traffic(out, s, stats)
    return dict(sorted(out.items()))


def _stream_connection_details(s: StreamSession) -> dict[str, Any]:
    peer = s.peer or ("", 0)
    return {
        "name": s.name,
        "node": s.broker.node_name,
        "peer_host": peer[0],
        "peer_port": peer[1],
        "user": s.username,
    }


def stream_publisher(s: StreamSession, p: Publisher) -> dict[str, Any]:
    """rabbitmq_stream_management's publisher: rabbit_stream_metrics' figures."""
    return {
        "confirmed": p.confirmed,
        "connection_details": _stream_connection_details(s),
        "errored": p.errored,
        "published": p.published,
        "publisher_id": p.id,
        "queue": {"name": p.stream, "vhost": s.vhost},
        "reference": p.reference,
    }


def stream_consumer(s: StreamSession, c: Subscription) -> dict[str, Any]:
    """rabbitmq_stream_management's consumer: records delivered, the first offset of
    the last chunk delivered, and how far the stream's committed end is past it."""
    return {
        "connection_details": _stream_connection_details(s),
        "consumed": c.consumed,
        "credits": c.credit,
        "offset": c.chunk_offset,
        "offset_lag": (c.queue.log.committed - 1) - c.chunk_offset,
        "properties": dict(c.properties),
        "queue": {"name": c.stream, "vhost": s.vhost},
        "subscription_id": c.id,
    }


def channel(ch: Channel, stats: Stats, node: str) -> dict[str, Any]:
    from leveret.management.stats import CHANNEL_PUBLISH_STATS, DELIVERY_STATS, channel_counters

    s = ch.host
    peer = s.peer or ("", 0)
    out: dict[str, Any] = {
        "acks_uncommitted": ch.acks_uncommitted,
        "confirm": ch.confirm,
        "connection_details": {
            "name": s.name,
            "peer_host": peer[0],
            "peer_port": peer[1],
        },
        "consumer_count": len(ch.consumers),
        "global_prefetch_count": ch.global_prefetch,
        "messages_unacknowledged": len(ch.unacked),
        "messages_uncommitted": len(ch.tx_publishes),
        "messages_unconfirmed": ch.unconfirmed,
        "name": channel_name(ch),
        "node": node,
        "number": ch.number,
        "pending_raft_commands": 0,
        "prefetch_count": ch.consumer_prefetch,
        # credit flow holds a channel back with its connection
        "state": "flow" if s.held_by else "running",
        "transactional": ch.tx,
        "user": s.username,
        "user_who_performed_action": s.username,
        "vhost": s.vhost,
    }
    counters = channel_counters(ch)
    # as RabbitMQ: the publishing figures once it published, the delivery figures once
    # something was delivered to it or asked for
    keys = (CHANNEL_PUBLISH_STATS if counters["publish"] else ()) + (
        DELIVERY_STATS if counters["deliver_get"] or counters["get_empty"] else ()
    )
    if keys:
        out["message_stats"] = stats.message_stats(
            counters, stats.channels.get(ch), tuple(sorted(keys))
        )
    return out


def vhost(v: VirtualHost, broker: BrokerCore, stats: Stats, age: Any = None) -> dict[str, Any]:
    age_l, incr_l, age_m, incr_m = age or (None, None, None, None)
    windows = stats.vhosts.get(v.name)
    out: dict[str, Any] = {
        "cluster_state": {broker.node_name: "running"},
        "default_queue_type": "undefined",
        "description": v.description,
        "metadata": {"description": v.description, "tags": list(v.tags)},
        "name": v.name,
        "tags": list(v.tags),
        "tracing": v.tracing,
    }
    if broker.compat.v4:
        # rabbit_vhost:i/2 at v4.2.9 (rabbit_vhost.erl:757-778): a vhost made without one
        # has the default queue type, classic (do_add, lines 197-202), in its metadata too;
        # and protected_from_deletion (vhost:info_keys, vhost.erl:126-136)
        out["default_queue_type"] = "classic"
        out["metadata"] = {"default_queue_type": "classic", **out["metadata"]}
        out["protected_from_deletion"] = False
    # as RabbitMQ's vhost_stats (rabbit_mgmt_db): each group of figures once the
    # collector has the vhost's row for it; a fresh vhost has none
    totals = stats.totals(v.name)
    keys = stats.shown_stats(totals)
    if keys:
        out["message_stats"] = stats.message_stats(totals, windows, keys, age_m, incr_m)
    if stats.had_queue(v.name):
        out.update(stats.length_details(stats.lengths(v.name), windows, age_l, incr_l))
    traffic = stats.vhost_traffic(v.name)
    if traffic is not None:  # once a connection has been in it, as RabbitMQ
        out.update(stats.message_stats(traffic, windows, TRAFFIC))
    return dict(sorted(out.items()))


def user(u: User, with_hash: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"name": u.name}
    if with_hash:
        out["password_hash"] = u.password_hash
        out["hashing_algorithm"] = "rabbit_password_hashing_sha256"
    out["tags"] = list(u.tags)
    out["limits"] = dict(u.limits)
    return out


def attributes(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``, in their order (RabbitMQ's key order)."""
    return {name: getattr(obj, name) for name in names}


def permission(p: Permission) -> dict[str, Any]:
    return attributes(p, ("user", "vhost", "configure", "write", "read"))


def overview(broker: BrokerCore, stats: Stats, listeners: list[dict[str, Any]], age: Any) -> Any:
    age_l, incr_l, age_m, incr_m = age or (None, None, None, None)
    sessions = list(stats.sessions())
    amqp10 = list(stats.amqp10())
    # an AMQP 1.0 session's direct connection has its channel (RabbitMQ 3.10.8's plugin)
    channels = sum(len(s.channels) for s in sessions) + len(list(stats.amqp10_channels()))
    queues = sum(len(v.queues) for v in broker.vhosts.values())
    exchanges = sum(len(v.exchanges) for v in broker.vhosts.values())
    consumers = sum(len(q.consumers) for v in broker.vhosts.values() for q in v.queues.values())
    version = broker.compat.version
    out: dict[str, Any] = {
        "management_version": version,
        "rates_mode": "basic",
        "sample_retention_policies": {
            "global": [600, 3600, 28800, 86400],
            "basic": [600, 3600],
            "detailed": [600],
        },
        "exchange_types": exchange_types(broker.compat.v4),
        "product_version": version,
        "product_name": "Leveret",
        "rabbitmq_version": version,
        "cluster_name": broker.cluster_name_value,
    }
    if broker.compat.v4:
        # rabbit_mgmt_wm_overview:to_json at v4.2.9: cluster and node tags (none set),
        # the crypto library, the default queue type and whether operator policies may
        # be changed; no release_series_support_status
        out.update(
            {
                "cluster_tags": {},
                "node_tags": {},
                "erlang_version": "none",
                "erlang_full_version": "none (Leveret runs on Python)",
                "crypto_lib_version": ssl.OPENSSL_VERSION,
                "disable_stats": False,
                "default_queue_type": "classic",
                "is_op_policy_updating_enabled": True,
                "enable_queue_totals": False,
            }
        )
    else:
        out.update(
            {
                "erlang_version": "none",
                "erlang_full_version": "none (Leveret runs on Python)",
                "release_series_support_status": "supported",
                "disable_stats": False,
                "enable_queue_totals": False,
            }
        )
    # rabbit_mgmt_db:overview: the vhosts' publishing figures, their queues' disk rates
    # (vhost_msg_rates) and their delivery figures, each once a vhost has them, in
    # RabbitMQ's order (sorted); the queue totals once a vhost has had a queue
    totals = stats.totals()
    queued = any(stats.had_queue(name) for name in broker.vhosts)
    keys = stats.shown_stats(totals) + (DISK_RATES if queued else ())
    return {
        **out,
        "message_stats": stats.message_stats(
            totals, stats.overview, tuple(sorted(keys)), age_m, incr_m
        ),
        "churn_rates": stats.churn_rates(),
        "queue_totals": (
            stats.length_details(stats.lengths(), stats.overview, age_l, incr_l) if queued else {}
        ),
        "object_totals": {
            "channels": channels,
            # as RabbitMQ, stream-protocol and AMQP 1.0 connections count
            "connections": len(sessions) + sum(1 for _ in stats.stream_sessions()) + len(amqp10),
            "consumers": consumers,
            "exchanges": exchanges,
            "queues": queues,
        },
        "node": broker.node_name,
        "listeners": listeners,
        "contexts": [],
    }
