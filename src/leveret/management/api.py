"""The management HTTP API in RabbitMQ 3.10's shapes: overview, nodes, health,
connections, channels and consumers. Exchanges, queues and bindings are in
:mod:`leveret.management.objects`; users, vhosts, permissions and definitions in
:mod:`leveret.management.admin`; authentication and the routes in
:mod:`leveret.management.app`."""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pamqp import commands

from leveret.broker import errors as rabbit
from leveret.broker import operations
from leveret.broker.amqp10_presence import DirectConnection, Shape, shape
from leveret.broker.amqp10_session import Amqp10Session
from leveret.broker.consumer import Consumer
from leveret.broker.message import Message
from leveret.management import amqp10conns, nodeinfo, views
from leveret.management.context import MANAGEMENT, Management, mgmt
from leveret.management.httputil import (
    ApiError,
    bad_request,
    check_failed,
    current_user,
    json_body,
    json_response,
    listing,
    no_content,
    not_found,
    rate_ages,
    require_admin,
    require_keys,
    resource,
    scoped,
)
from leveret.protocol import spec
from leveret.protocol.errors import AMQPError
from leveret.server.resources import file_descriptors, sockets_limit

if TYPE_CHECKING:
    from leveret.broker.session import Session
    from leveret.broker.stream_session import StreamSession

    # a connection the management API lists and closes, of any protocol
    Closable = Session | StreamSession | DirectConnection | Amqp10Session

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- overview etc.
async def overview(request: web.Request) -> web.Response:
    m = mgmt(request)
    data = views.overview(m.broker, m.stats, m.listeners, rate_ages(request))
    return json_response(data)


#: what rabbit_mgmt_wm_auth answers when the management plugin's OAuth 2 (enable_uaa) is off,
#: as it always is in Leveret, which has no OAuth 2
NO_OAUTH = {"enable_uaa": False, "uaa_client_id": "", "uaa_location": ""}


async def auth(request: web.Request) -> web.Response:
    """How the management UI is to log in (rabbit_mgmt_wm_auth): answered to anyone, with
    credentials or without, right or wrong (its is_authorized lets every request in)."""
    return json_response(NO_OAUTH)


def _attempts_of(request: web.Request) -> Management:
    """rabbit_mgmt_wm_auth_attempts' checks: a monitoring user or an administrator
    (is_authorized_monitor), then the node (404 for another)."""
    user = current_user(request)
    if not (user.is_administrator or "monitoring" in user.tags):
        raise ApiError(401, "not_authorised", "Not monitor user")
    m = mgmt(request)
    if request.match_info["node"] != m.broker.node_name:
        raise not_found()
    return m


async def auth_attempts(request: web.Request) -> web.Response:
    """The node's login attempts per protocol (rabbit_core_metrics:get_auth_attempts)."""
    return json_response(_attempts_of(request).broker.auth_attempts.protocols())


async def auth_attempts_by_source(request: web.Request) -> web.Response:
    """Per remote address, user and protocol: none while the node does not track them
    (rabbit.track_auth_attempt_source, off by default)."""
    return json_response(_attempts_of(request).broker.auth_attempts.sources())


async def auth_attempts_reset(request: web.Request) -> web.Response:
    """DELETE either resource: every count starts again (reset_auth_attempt_metrics)."""
    _attempts_of(request).broker.auth_attempts.reset()
    return no_content()


async def whoami(request: web.Request) -> web.Response:
    user = current_user(request)
    return json_response({"name": user.name, "tags": list(user.tags)})


def node(m: Management) -> dict[str, Any]:
    import os
    import time

    res = m.server.resources
    out: dict[str, Any] = {
        "name": m.broker.node_name,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "mem_used": res.mem_used,
        "mem_limit": res.mem_limit,
        "mem_alarm": res.mem_alarm,
        "mem_calculation_strategy": "rss",
    }
    if res.disk_free is not None:
        # measured on the data directory's file system; without one there is none
        out["disk_free"] = res.disk_free
        out["disk_free_limit"] = res.disk_free_limit
    out["disk_free_alarm"] = res.disk_alarm
    # descriptors and sockets as RabbitMQ counts them: every open descriptor of the process
    # against its open files limit; the AMQP connections' sockets against RabbitMQ's share
    # of that limit for sockets. No proc_used / proc_total: Leveret has no Erlang processes,
    # nor a figure of that meaning.
    fd_used, fd_total = file_descriptors()
    out.update(
        {
            "fd_used": fd_used,
            "fd_total": fd_total,
            "sockets_used": len(m.server.state.connections),
            "sockets_total": sockets_limit(fd_total),
        }
    )
    out.update(
        {
            "uptime": int((time.time() - m.stats.started) * 1000),
            "processors": os.cpu_count() or 1,
            "rates_mode": "basic",
            "exchange_types": views.exchange_types(m.broker.compat.v4),
            "partitions": [],
            "applications": [],
            "contexts": [],
            "enabled_plugins": list(m.broker.plugins),
        }
    )
    out.update(nodeinfo.node_info(m))
    # the node's churn: connection_churn_metrics, which the overview's churn_rates shows
    # too (rabbit_core_metrics; one node, so the same figures)
    out.update(m.stats.churn_rates())
    if m.broker.compat.v4:
        # rabbit_mgmt_external_stats at v4.2.9 (?OTHER_KEYS, i/2): each node tells its
        # versions, as /api/overview does
        out.update(
            {
                "rabbitmq_version": m.broker.compat.version,
                "erlang_version": "none",
                "erlang_full_version": "none (Leveret runs on Python)",
                "crypto_lib_version": ssl.OPENSSL_VERSION,
            }
        )
    return out


async def nodes(request: web.Request) -> web.Response:
    return json_response([node(mgmt(request))])


async def node_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    if request.match_info["node"] != m.broker.node_name:
        raise not_found()
    return json_response(node(m))


async def cluster_name(request: web.Request) -> web.Response:
    return json_response({"name": mgmt(request).broker.cluster_name_value})


def _as_binary(value: Any) -> str | None:
    """rabbit_mgmt_wm_cluster_name:as_binary: a string, or a list of bytes joined (as
    UTF-8); None for anything else."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(type(b) is int and 0 <= b < 256 for b in value):
        return None
    try:
        return bytes(value).decode()
    except UnicodeDecodeError:
        return None


async def cluster_name_put(request: web.Request) -> web.Response:
    """rabbit_mgmt_wm_cluster_name's PUT: an administrator's, ``{"name": ...}`` a string
    (or a list of bytes, which as_binary joins); 204 always, the resource existing. Any
    other name crashes RabbitMQ's as_binary (500, no body): a plain refusal here."""
    require_admin(request)
    body = await json_body(request)
    require_keys(body, "name")
    name = _as_binary(body["name"])
    if name is None:
        raise bad_request("name must be a string")
    actor = operations.Actor(current_user(request).name, None)
    operations.set_cluster_name(mgmt(request).broker, actor, name)
    return no_content()


async def extensions(request: web.Request) -> web.Response:
    return json_response([])


# rabbit_alarm:format_as_map's names of the resources
_ALARM_RESOURCES = (("disk", "disk space"), ("memory", "memory"))


def _alarms_check(request: web.Request, reason: str) -> web.Response:
    m = mgmt(request)
    in_effect = m.server.state.alarms
    if not in_effect:
        return json_response({"status": "ok"})
    return check_failed(
        {
            "alarms": [
                {"node": m.broker.node_name, "resource": name}
                for key, name in _ALARM_RESOURCES
                if key in in_effect
            ],
            "reason": reason,
            "status": "failed",
        }
    )


async def alarms(request: web.Request) -> web.Response:
    return _alarms_check(request, "There are alarms in effect in the cluster")


async def local_alarms(request: web.Request) -> web.Response:
    return _alarms_check(request, "There are alarms in effect on the node")


ALIVENESS_QUEUE = "aliveness-test"


async def aliveness(request: web.Request) -> web.Response:
    """RabbitMQ's round trip (rabbit_mgmt_wm_aliveness_test), as the user asking, through
    the broker's operations as a channel of theirs would: declare the aliveness-test queue
    (kept for the next test), publish test_message to it through the default exchange,
    and get it back."""
    m = mgmt(request)
    v = m.vhost(request)
    user = current_user(request).name
    actor = m.actor(request, v)
    try:
        if actor.permission is None:  # no access to the vhost: no channel to open
            raise rabbit.access_refused("queue", ALIVENESS_QUEUE, v.name, user)
        if m.broker.compat.v4:
            # a no-op from 4.1: it used a transient non-exclusive queue, a deprecated
            # feature (v4.2.9 rabbit_mgmt_wm_aliveness_test.erl: a channel, then ok)
            return json_response({"status": "ok"})
        declare = spec.command(commands.Queue.Declare, queue=ALIVENESS_QUEUE)
        operations.declare_queue(v, actor, declare)
        message = Message.build("", ALIVENESS_QUEUE, b"test_message", None)
        operations.publish(v, actor, "", message, False)
        m.stats.count_publish(v.name)
        entry = operations.open_queue(v, actor, ALIVENESS_QUEUE).get(no_ack=True)
    except AMQPError as exc:
        # as rabbit_mgmt_util:with_channel answers a channel the broker closed
        if exc.code == spec.ACCESS_REFUSED:
            raise ApiError(401, "not_authorised", exc.reply_text) from exc
        if exc.code == spec.NOT_FOUND:
            raise ApiError(404, "not_found", exc.reply_text) from exc
        raise bad_request(f"{exc.code} {exc.reply_text}") from exc
    if entry is None:
        return json_response({"status": "failed", "reason": "aliveness-test queue is empty"}, 503)
    return json_response({"status": "ok"})


# ----------------------------------------------------- connections and channels
async def connections(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        m.vhost(request)
    alarm = bool(m.server.state.alarms)
    # as RabbitMQ: the stream-protocol connections are listed with the AMQP ones
    items = [
        views.connection(s, m.stats, alarm)
        for s in m.sessions(request)
        if vhost is None or s.vhost == vhost
    ] + [
        views.stream_connection(s, m.stats)
        for s in m.stream_sessions(request)
        if vhost is None or s.vhost == vhost
    ]
    items += [
        amqp10conns.connection(c, m.stats, alarm)
        for c in m.amqp10(request)
        if vhost is None or c.vhost == vhost
    ]
    items.sort(key=lambda c: str(c["name"]))
    return listing(request, items, pages=vhost is None)  # a vhost's: not paged


def _stream_named(m: Management, request: web.Request) -> StreamSession | None:
    name = request.match_info["name"]
    return next((s for s in m.stream_sessions(request) if s.name == name), None)


async def connection_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    stream = _stream_named(m, request)
    if stream is not None:
        return json_response(views.stream_connection(stream, m.stats, single=True))
    amqp10 = m.amqp10_named(request)
    if amqp10 is not None:
        alarm = bool(m.server.state.alarms)
        return json_response(amqp10conns.connection(amqp10, m.stats, alarm))
    return json_response(
        views.connection(m.session_named(request), m.stats, bool(m.server.state.alarms))
    )


def _close_reason(request: web.Request) -> str:
    """The reason a management DELETE closes a connection with (its ``X-Reason`` header;
    rabbit_mgmt_wm_connection's and rabbit_mgmt_wm_connection_user_name's
    force_close_connection)."""
    return request.headers.get("X-Reason", "Closed via management plugin")


async def connection_delete(request: web.Request) -> web.Response:
    m = mgmt(request)
    reason = _close_reason(request)
    stream = _stream_named(m, request)
    if stream is not None:
        stream.force_close(reason)
        return no_content()
    amqp10 = m.amqp10_named(request)
    if amqp10 is not None:
        amqp10.force_close(reason)
        return no_content()
    s = m.session_named(request)
    s.force_close(reason)
    return no_content()


def _of_user(m: Management, request: web.Request) -> list[Closable]:
    """The open connections of the user the path names (``{username}``), of every protocol
    /api/connections lists, by vhost then name (rabbit_connection_tracking:list_of_user:
    none for a user that does not exist). Only an administrator or a monitoring user gets
    here, who sees every connection."""
    name = request.match_info["username"]
    found: list[Closable] = [
        *(s for s in m.sessions(request) if s.username == name),
        *(s for s in m.stream_sessions(request) if s.username == name),
        *(c for c in m.amqp10(request) if c.username == name),
    ]
    return sorted(found, key=lambda c: (c.vhost, c.name))


def _may_act_on_users(request: web.Request, delete: bool) -> None:
    """rabbit_mgmt_util:is_authorized_user as rabbit_mgmt_wm_connection_user_name calls it:
    a monitoring user may list anyone's connections, an administrator list and close them.
    For anyone else RabbitMQ 3.10.8's check fails (it looks up ``user`` in what is no
    connection: an HTTP 500 with no body), their own connections too; Leveret refuses them
    with the check's own words."""
    user = current_user(request)
    if user.is_administrator or (not delete and "monitoring" in user.tags):
        return
    raise ApiError(401, "not_authorised", "User not authorised to access object")


async def user_connections(request: web.Request) -> web.Response:
    """rabbit_mgmt_wm_connection_user_name's GET: the user's tracked connections as
    filter_tracked_conn_list shows them (name, vhost, user, node), sorted, paged and
    projected as any listing (reply_list_or_paginate)."""
    _may_act_on_users(request, delete=False)
    m = mgmt(request)
    node = m.broker.node_name
    items: list[dict[str, Any]] = [
        {"name": c.name, "vhost": c.vhost, "user": c.username, "node": node}
        for c in _of_user(m, request)
    ]
    return listing(request, items)


async def user_connections_delete(request: web.Request) -> web.Response:
    """rabbit_mgmt_wm_connection_user_name's DELETE: each of the user's connections closed
    as DELETE /api/connections/{name} closes one, with the same reason; 204 whether there
    were any or not."""
    _may_act_on_users(request, delete=True)
    reason = _close_reason(request)
    for c in _of_user(mgmt(request), request):
        c.force_close(reason)
    return no_content()


async def connection_channels(request: web.Request) -> web.Response:
    """A connection's channels (rabbit_mgmt_wm_connection_channels: not paged)."""
    m = mgmt(request)
    if _stream_named(m, request) is not None:
        return listing(request, [], pages=False)  # a stream connection has no channels
    amqp10 = m.amqp10_named(request)
    node = m.broker.node_name
    if isinstance(amqp10, DirectConnection):  # its session's channel (RabbitMQ 3.10.8)
        return listing(request, [amqp10conns.channel(amqp10, m.stats, node)], pages=False)
    if amqp10 is not None:
        return listing(request, [], pages=False)  # RabbitMQ 4.2's sessions are no channels
    s = m.session_named(request)
    items = [views.channel(ch, m.stats, node) for _, ch in sorted(s.channels.items())]
    return listing(request, items, pages=False)


async def connection_sessions(request: web.Request) -> web.Response:
    """RabbitMQ 4.2's AMQP 1.0 sessions of a connection (rabbit_mgmt_wm_connection_sessions);
    RabbitMQ 3.10.8 has no such endpoint (404)."""
    m = mgmt(request)
    if shape(m.broker) is Shape.PLUGIN:
        raise not_found()
    amqp10 = m.amqp10_named(request)
    if isinstance(amqp10, Amqp10Session):
        return listing(request, amqp10conns.sessions(amqp10), pages=False)
    if _stream_named(m, request) is None:
        m.session_named(request)  # 404 when there is no such connection
    raise bad_request("connection does not use AMQP 1.0")


def _amqp10_channels(m: Management, request: web.Request) -> list[DirectConnection]:
    """The AMQP 1.0 sessions whose channel the user may see (RabbitMQ 3.10.8's plugin)."""
    return [c for c in m.amqp10(request) if isinstance(c, DirectConnection)]


async def channels(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        m.vhost(request)
    node = m.broker.node_name
    items = [
        views.channel(ch, m.stats, node)
        for ch in m.channels(request)
        if vhost is None or ch.host.vhost == vhost
    ] + [
        amqp10conns.channel(c, m.stats, node)
        for c in _amqp10_channels(m, request)
        if vhost is None or c.vhost == vhost
    ]
    items.sort(key=lambda c: str(c["name"]))
    return listing(request, items, pages=vhost is None)  # a vhost's: not paged


async def channel_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    name = request.match_info["name"]
    node = m.broker.node_name
    for ch in m.channels(request):
        if views.channel_name(ch) == name:
            data = views.channel(ch, m.stats, node)
            data["consumer_details"] = [views.consumer(c, node) for c in ch.consumers.values()]
            return json_response(data)
    found = [c for c in _amqp10_channels(m, request) if amqp10conns.channel_name(c) == name]
    if len(found) != 1:  # none, or two sessions' of one name: none found
        raise not_found()
    data = amqp10conns.channel(found[0], m.stats, node)
    data["consumer_details"] = [
        views.consumer(link.consumer, node)
        for link in found[0].session.consumers.values()
        if link.consumer is not None
    ]
    return json_response(data)


async def consumers(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = (
        [m.visible_vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    )
    out = [
        views.consumer(c, m.broker.node_name)
        for v in vhosts
        for q in v.queues.values()
        for c in q.consumers
        if isinstance(c, Consumer)
    ]
    return json_response(out)


async def deprecated_features(request: web.Request) -> web.Response:
    """RabbitMQ 4's deprecated features (rabbit_mgmt_wm_deprecated_features, from 3.13;
    rabbit_depr_ff_extra:cli_info at v4.2.9): each with its phase, documentation, the
    application providing it and whether the configuration permits it; ``/used`` lists
    those in use (only transient_nonexcl_queues can tell: a transient non-exclusive queue
    exists) and without a state. RabbitMQ 3.10.8 has no such endpoint."""
    compat = mgmt(request).broker.compat
    used = request.path.rstrip("/").endswith("/used")
    out = []
    for name in sorted(compat.deprecated_features):
        feature = compat.deprecated_features[name]
        if used and not _in_use(mgmt(request), name):
            continue
        row: dict[str, Any] = {
            "deprecation_phase": feature.phase.value,
            "desc": "",
            "doc_url": feature.doc_url,
            "name": name,
            "provided_by": feature.provided_by,
        }
        if not used:
            row["state"] = "permitted" if compat.permitted(name) else "denied"
        out.append(row)
    return json_response(out)


def _in_use(m: Management, name: str) -> bool:
    """A deprecated feature's is_feature_used callback (v4.2.9
    rabbit_amqqueue.erl:121-136 are_transient_nonexcl_used); the others have none."""
    if name != "transient_nonexcl_queues":
        return False
    return any(
        not q.durable and q.exclusive_owner is None
        for v in m.broker.vhosts.values()
        for q in v.queues.values()
    )


def routes(app: web.Application) -> None:
    r = app.router
    management = app.get(MANAGEMENT)  # (none: the routes alone are asked for)
    if management is None or management.broker.compat.v4:  # none in RabbitMQ 3.10.8
        resource(r, "/api/deprecated-features", deprecated_features)
        resource(r, "/api/deprecated-features/used", deprecated_features)
    resource(r, "/api/auth", auth)
    resource(r, "/api/auth/attempts/{node}", auth_attempts, delete=auth_attempts_reset)
    resource(
        r, "/api/auth/attempts/{node}/source", auth_attempts_by_source, delete=auth_attempts_reset
    )
    # before /api/connections/{name}/channels, as in RabbitMQ's dispatch list: a user
    # named "channels" has /api/connections/username/channels
    resource(
        r, "/api/connections/username/{username}", user_connections, delete=user_connections_delete
    )
    # the paths only read (GET), then the others
    for path, get in (
        ("/api/overview", overview),
        ("/api/whoami", whoami),
        ("/api/nodes", nodes),
        ("/api/nodes/{node}", node_one),
        ("/api/extensions", extensions),
        ("/api/health/checks/alarms", alarms),
        ("/api/health/checks/local-alarms", local_alarms),
        ("/api/aliveness-test/{vhost}", aliveness),
        ("/api/connections", connections),
        ("/api/connections/{name}/channels", connection_channels),
        ("/api/connections/{name}/sessions", connection_sessions),
        ("/api/vhosts/{vhost}/connections", connections),
        ("/api/channels", channels),
        ("/api/channels/{name}", channel_one),
        ("/api/vhosts/{vhost}/channels", channels),
    ):
        resource(r, path, get)
    resource(r, "/api/cluster-name", cluster_name, put=cluster_name_put)
    resource(r, "/api/connections/{name}", connection_one, delete=connection_delete)
    scoped(r, "/api/consumers", consumers, "{vhost}")
