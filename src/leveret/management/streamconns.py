"""The stream-protocol connections, publishers and consumers in the shapes of RabbitMQ
3.10's ``rabbitmq_stream_management`` plugin:

* ``/api/stream/connections`` and ``/api/stream/connections/{vhost}``: the connections
  (listed, sorted and paged as ``/api/connections``);
* ``/api/stream/connections/{vhost}/{name}``: one, and ``DELETE`` to close it;
* ``.../{name}/publishers`` and ``.../{name}/consumers``: what it publishes and reads;
* ``/api/stream/publishers[/{vhost}[/{stream}]]`` and ``/api/stream/consumers[/{vhost}]``.

As RabbitMQ: a user who is neither an administrator nor a monitoring user sees only their
own connections, publishers and consumers; one connection is shown to its own user or a
monitoring user, and closed by its own user or an administrator (401 for anyone else,
also when there is no such connection)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from leveret.management import views
from leveret.management.context import Management, mgmt
from leveret.management.httputil import (
    ApiError,
    current_user,
    is_admin,
    json_response,
    listing,
    no_content,
    not_found,
    resource,
    scoped,
)

if TYPE_CHECKING:
    from leveret.broker.stream_session import StreamSession


def _is_monitor(request: web.Request) -> bool:
    return is_admin(request) or "monitoring" in current_user(request).tags


def _not_authorised() -> ApiError:
    return ApiError(401, "not_authorised", "User not authorised to access object")


def _existing_vhost(m: Management, request: web.Request) -> str | None:
    """The request's vhost (404 when there is no such vhost); None when it names none."""
    name = request.match_info.get("vhost")
    if name is not None and name not in m.broker.vhosts:
        raise not_found()
    return name


# ------------------------------------------------------------------ connections
async def connections(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = request.match_info.get("vhost")
    if vhost is not None:
        # rabbit_mgmt_util:is_authorized_vhost_visible_for_monitoring, then the vhost
        if _is_monitor(request):
            _existing_vhost(m, request)
        else:
            m.vhost(request)
    return listing(
        request,
        [
            views.stream_connection(s, m.stats)
            for s in m.stream_sessions(request)
            if vhost is None or s.vhost == vhost
        ],
    )


def _connection(request: web.Request, in_vhost: bool = True) -> StreamSession:
    """The named connection, when the user may see it (or, for DELETE, close it).
    rabbit_stream_connection_mgmt looks it up in the vhost of the path; the publisher
    and consumer listings look it up by name only (rabbit_mgmt_wm_connection:conn)."""
    m = mgmt(request)
    name = request.match_info["name"]
    vhost = request.match_info["vhost"]
    found = next(
        (
            s
            for s in m.stats.stream_sessions()
            if s.name == name and (not in_vhost or s.vhost == vhost)
        ),
        None,
    )
    user = current_user(request)
    allowed = is_admin(request) if request.method == "DELETE" else _is_monitor(request)
    if not allowed and (found is None or found.username != user.name):
        raise _not_authorised()
    if found is None:
        raise not_found()
    return found


async def connection_one(request: web.Request) -> web.Response:
    m = mgmt(request)
    return json_response(views.stream_connection(_connection(request), m.stats, single=True))


async def connection_delete(request: web.Request) -> web.Response:
    s = _connection(request)
    s.force_close(request.headers.get("X-Reason", "Closed via management plugin"))
    return no_content()


async def connection_publishers(request: web.Request) -> web.Response:
    s = _connection(request, in_vhost=False)
    return json_response([views.stream_publisher(s, p) for _, p in sorted(s.publishers.items())])


async def connection_consumers(request: web.Request) -> web.Response:
    s = _connection(request, in_vhost=False)
    return json_response([views.stream_consumer(s, c) for _, c in sorted(s.subscriptions.items())])


# ---------------------------------------------------------- publishers, consumers
def _visible(request: web.Request) -> list[StreamSession]:
    """Every stream connection for a monitoring user; their own for anyone else."""
    m = mgmt(request)
    everyone = _is_monitor(request)
    user = current_user(request).name
    return [s for s in m.stats.stream_sessions() if everyone or s.username == user]


def _order(row: tuple[StreamSession, int, str]) -> tuple[str, str, int, int]:
    # rabbit_stream_mgmt_db lists them in the order of their keys: the stream (its vhost,
    # then its name), the connection (pids grow with time, as ids here), the id
    s, ident, stream = row
    return (s.vhost, stream, s.id, ident)


async def publishers(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = _existing_vhost(m, request)
    stream = request.match_info.get("stream")
    if vhost is not None and stream is not None and stream not in m.broker.vhosts[vhost].queues:
        raise not_found()
    rows = [
        (s, p)
        for s in _visible(request)
        if vhost is None or s.vhost == vhost
        for p in s.publishers.values()
        if stream is None or p.stream == stream
    ]
    rows.sort(key=lambda r: _order((r[0], r[1].id, r[1].stream)))
    out: list[dict[str, Any]] = [views.stream_publisher(s, p) for s, p in rows]
    return json_response(out)


async def consumers(request: web.Request) -> web.Response:
    m = mgmt(request)
    vhost = _existing_vhost(m, request)
    rows = [
        (s, c)
        for s in _visible(request)
        if vhost is None or s.vhost == vhost
        for c in s.subscriptions.values()
    ]
    rows.sort(key=lambda r: _order((r[0], r[1].id, r[1].stream)))
    return json_response([views.stream_consumer(s, c) for s, c in rows])


def routes(app: web.Application) -> None:
    r = app.router
    item = "/api/stream/connections/{vhost}/{name}"
    scoped(r, "/api/stream/connections", connections, "{vhost}")
    resource(r, item, connection_one, delete=connection_delete)
    resource(r, item + "/publishers", connection_publishers)
    resource(r, item + "/consumers", connection_consumers)
    scoped(r, "/api/stream/publishers", publishers, "{vhost}", "{stream}")
    scoped(r, "/api/stream/consumers", consumers, "{vhost}")
