"""The management HTTP API in RabbitMQ 3.10's shapes: authentication, overview, nodes,
health, connections, channels, consumers and the dashboard's files. Exchanges, queues and
bindings are in :mod:`leveret.management.objects`; users, vhosts, permissions and
definitions in :mod:`leveret.management.admin`."""

from __future__ import annotations

import logging
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management import views
from leveret.management.httputil import (
    MANAGEMENT_TAGS,
    ApiError,
    Handler,
    access_refused,
    credentials,
    current_user,
    from_amqp,
    is_admin,
    json_response,
    listing,
    no_content,
    not_found,
    rate_ages,
)
from leveret.protocol.errors import AMQPError

if TYPE_CHECKING:
    from leveret.broker.broker import Broker
    from leveret.broker.channel import Channel
    from leveret.broker.session import Session
    from leveret.broker.vhost import VirtualHost
    from leveret.management.stats import Stats
    from leveret.server.app import Server

log = logging.getLogger(__name__)


class Management:
    """State shared by the handlers: the server, its broker and the stats window."""

    def __init__(self, server: Server, stats: Stats) -> None:
        self.server = server
        self.broker: Broker = server.broker
        self.stats = stats
        self.listeners: list[dict[str, Any]] = []

    # --------------------------------------------------------------- lookups
    def vhost(self, request: web.Request, name: str | None = None) -> VirtualHost:
        name = request.match_info["vhost"] if name is None else name
        v = self.broker.vhosts.get(name)
        if v is None or not self.can_see(request, name):
            raise not_found()
        return v

    def can_see(self, request: web.Request, vhost: str) -> bool:
        if is_admin(request) or "monitoring" in current_user(request).tags:
            return True
        return self.broker.users.permission(current_user(request).name, vhost) is not None

    def visible_vhosts(self, request: web.Request) -> list[VirtualHost]:
        return [v for name, v in sorted(self.broker.vhosts.items()) if self.can_see(request, name)]

    def check(self, request: web.Request, vhost: str, what: str, name: str) -> None:
        """The user's vhost permission for ``what`` (configure, write, read) on ``name``."""
        perm = self.broker.users.permission(current_user(request).name, vhost)
        if perm is None or not perm.allows(what, name):
            raise access_refused()

    def sessions(self, request: web.Request) -> list[Session]:
        user = current_user(request)
        everyone = is_admin(request) or "monitoring" in user.tags
        out = [s for s in self.stats.sessions() if everyone or s.username == user.name]
        return sorted(out, key=views.connection_name)

    def channels(self, request: web.Request) -> list[Channel]:
        return [ch for s in self.sessions(request) for _, ch in sorted(s.channels.items())]

    def session_named(self, request: web.Request) -> Session:
        name = request.match_info["name"]
        for s in self.sessions(request):
            if views.connection_name(s) == name:
                return s
        raise not_found()


MANAGEMENT: web.AppKey[Management] = web.AppKey("management", Management)


def mgmt(request: web.Request) -> Management:
    return request.app[MANAGEMENT]


# ------------------------------------------------------------------- middleware
@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    path = request.path
    if not path.startswith("/api/"):
        return await handler(request)
    try:
        if path != "/api/index.html":
            m = mgmt(request)
            creds = credentials(request)
            if creds is None:
                raise ApiError(401, "not_authorized", "Login failed")
            peer = request.remote
            user = m.broker.users.authenticate(creds[0], creds[1], peer)
            if user is None:
                raise ApiError(401, "not_authorized", "Login failed")
            if not MANAGEMENT_TAGS.intersection(user.tags):
                raise ApiError(401, "not_authorised", "Not management user")
            request["user"] = user
        return await handler(request)
    except ApiError as exc:
        return json_response({"error": exc.error, "reason": exc.reason}, exc.status)
    except AMQPError as exc:
        err = from_amqp(exc)
        return json_response({"error": err.error, "reason": err.reason}, err.status)
    except web.HTTPNotFound:
        return json_response({"error": "Object Not Found", "reason": "Not Found"}, 404)
    except web.HTTPMethodNotAllowed:
        return json_response({"error": "bad_request", "reason": "method not allowed"}, 405)


# ---------------------------------------------------------------- overview etc.
async def overview(request: web.Request) -> web.Response:
    m = mgmt(request)
    data = views.overview(m.broker, m.stats, m.listeners, rate_ages(request))
    return json_response(data)


async def whoami(request: web.Request) -> web.Response:
    user = current_user(request)
    return json_response({"name": user.name, "tags": list(user.tags)})


def node(m: Management) -> dict[str, Any]:
    import os
    import resource
    import time

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "name": m.broker.node_name,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "mem_used": rss,
        "mem_limit": m.server.config.memory_high_watermark,
        "mem_alarm": m.server.memory_alarm,
        "disk_free_alarm": False,
        "uptime": int((time.time() - m.stats.started) * 1000),
        "processors": os.cpu_count() or 1,
        "rates_mode": "basic",
        "exchange_types": views.EXCHANGE_TYPES,
        "partitions": [],
        "applications": [],
        "contexts": [],
        "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
    }


async def nodes(request: web.Request) -> web.Response:
    return json_response([node(mgmt(request))])


async def node_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    if request.match_info["node"] != m.broker.node_name:
        raise not_found()
    return json_response(node(m))


async def cluster_name(request: web.Request) -> web.Response:
    return json_response({"name": mgmt(request).broker.cluster_name})


async def extensions(request: web.Request) -> web.Response:
    return json_response([])


async def alarms(request: web.Request) -> web.Response:
    m = mgmt(request)
    if m.server.memory_alarm:
        return json_response(
            {
                "status": "failed",
                "reason": "resource alarm(s) in effect in the cluster",
                "alarms": [{"node": m.broker.node_name, "resource": "memory"}],
            },
            503,
        )
    return json_response({"status": "ok"})


async def aliveness(request: web.Request) -> web.Response:
    mgmt(request).vhost(request)
    return json_response({"status": "ok"})


# ----------------------------------------------------- connections and channels
async def connections(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        m.vhost(request)
    return listing(
        request,
        [views.connection(s) for s in m.sessions(request) if vhost is None or s.vhost == vhost],
    )


async def connection_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    return json_response(views.connection(m.session_named(request)))


async def connection_delete(request: web.Request) -> web.Response:
    m = mgmt(request)
    s = m.session_named(request)
    reason = request.headers.get("X-Reason", "Closed via management plugin")
    s.force_close(reason)
    return no_content()


async def connection_channels(request: web.Request) -> web.Response:
    m = mgmt(request)
    s = m.session_named(request)
    return listing(request, [views.channel(ch, m.stats) for _, ch in sorted(s.channels.items())])


async def channels(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        m.vhost(request)
    return listing(
        request,
        [
            views.channel(ch, m.stats)
            for ch in m.channels(request)
            if vhost is None or ch.session.vhost == vhost
        ],
    )


async def channel_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    for ch in m.channels(request):
        if views.channel_name(ch) == request.match_info["name"]:
            data = views.channel(ch, m.stats)
            data["consumer_details"] = [views.consumer(c) for c in ch.consumers.values()]
            return json_response(data)
    raise not_found()


async def consumers(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhosts = [m.vhost(request)] if "vhost" in request.match_info else m.visible_vhosts(request)
    out = [views.consumer(c) for v in vhosts for q in v.queues.values() for c in q.consumers]
    return json_response(out)


# ---------------------------------------------------------------- static files
async def index(request: web.Request) -> web.StreamResponse:
    return static_file("index.html")


async def static(request: web.Request) -> web.StreamResponse:
    return static_file(request.match_info["file"])


STATIC_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


def static_file(name: str) -> web.StreamResponse:
    if "/" in name or name.startswith("."):
        raise web.HTTPNotFound()
    ext = name[name.rfind(".") :]
    if ext not in STATIC_TYPES:
        raise web.HTTPNotFound()
    try:
        data = resources.files("leveret.management").joinpath("static", name).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise web.HTTPNotFound() from exc
    return web.Response(
        body=data, content_type=STATIC_TYPES[ext], headers={"Cache-Control": "no-cache"}
    )


def routes(app: web.Application) -> None:
    from leveret.management import admin, objects

    r = app.router
    r.add_get("/", index)
    r.add_get("/static/{file}", static)
    r.add_get("/api/overview", overview)
    r.add_get("/api/whoami", whoami)
    r.add_get("/api/nodes", nodes)
    r.add_get("/api/nodes/{node}", node_one)
    r.add_get("/api/cluster-name", cluster_name)
    r.add_get("/api/extensions", extensions)
    r.add_get("/api/health/checks/alarms", alarms)
    r.add_get("/api/health/checks/local-alarms", alarms)
    r.add_get("/api/aliveness-test/{vhost}", aliveness)
    r.add_get("/api/connections", connections)
    r.add_get("/api/connections/{name}", connection_one)
    r.add_delete("/api/connections/{name}", connection_delete)
    r.add_get("/api/connections/{name}/channels", connection_channels)
    r.add_get("/api/vhosts/{vhost}/connections", connections)
    r.add_get("/api/channels", channels)
    r.add_get("/api/channels/{name}", channel_one)
    r.add_get("/api/vhosts/{vhost}/channels", channels)
    r.add_get("/api/consumers", consumers)
    r.add_get("/api/consumers/{vhost}", consumers)
    objects.routes(app)
    admin.routes(app)


def make_app(management: Management) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=64 * 1024 * 1024)
    app[MANAGEMENT] = management
    routes(app)
    return app
